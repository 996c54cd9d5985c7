"""A multi-node vLLM group's rendered commands form a real Ray cluster before vLLM starts.

No GPU, LeaderWorkerSet controller or vLLM image exists here, so the group's pods are two
test hosts (network namespaces, each with its address and default route as a pod has) and
the environment the LeaderWorkerSet controller gives its pods. Ray is real (PyPI's); vLLM
is a stand-in module that records its arguments and the Ray nodes alive when it starts,
which is what vLLM's Ray executor places its pipeline stages on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from netns import Host, host_pair, missing
from samples import EDGE_SAMPLES, load_yaml

SAMPLE = next(p for p in EDGE_SAMPLES if p.stem == "llama-405b-multinode-nvidia")
WAITING = b"waiting for 2 Ray nodes"
STAND_IN = '''\
import json, sys
import ray
ray.init(address="auto", logging_level="ERROR")
alive = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])
print("SERVED " + json.dumps({"argv": sys.argv[1:], "nodes": alive}), flush=True)
'''


def _group() -> dict[str, Any]:
    model = parse_llmmodel(load_yaml(SAMPLE))
    lws = next(o for o in render(model, Settings()) if o["kind"] == "LeaderWorkerSet")
    return dict(lws["spec"]["leaderWorkerTemplate"])


def _kubelet_expand(value: str, env: dict[str, str]) -> str:
    """$(NAME) in a container's command and args, as the kubelet expands them."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), value)


def _argv(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    return [_kubelet_expand(a, env) for a in [*container["command"], *container.get("args", [])]]


@pytest.fixture
def stand_in_vllm(tmp_path: Path) -> Path:
    """A `vllm.entrypoints.openai.api_server` module that records what it was started with."""
    module = tmp_path / "vllm" / "entrypoints" / "openai"
    module.mkdir(parents=True)
    for package in (module.parent.parent, module.parent, module):
        (package / "__init__.py").write_text("")
    (module / "api_server.py").write_text(STAND_IN)
    return tmp_path


class Pod:
    """One of the group's containers running on a test host."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.output = b""

    async def until(self, marker: bytes, timeout: float = 120) -> bytes:
        """The line holding `marker` (the process's output is read up to it)."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout):
            while True:
                line = await self.proc.stdout.readline()
                self.output += line
                if marker in line:
                    return line
                if not line:
                    raise AssertionError(f"exited without {marker!r}:\n{self.output.decode()}")


@pytest.fixture
def group_hosts() -> Iterator[tuple[Host, Host, Path]]:
    """Two hosts, and a short directory for Ray's files (its socket paths are limited),
    removed once every process on the hosts is gone."""
    reason = missing()
    if reason:
        pytest.fail(f"the Ray group test needs two test hosts: {reason}")
    with tempfile.TemporaryDirectory(prefix="ray") as short, host_pair() as pair:
        yield (*pair, Path(short))


@contextlib.asynccontextmanager
async def running(host: Host, argv: list[str], env: dict[str, str],
                  log: Path | None = None) -> AsyncIterator[Pod]:
    """The container's argv on `host`, its output read by the test or written to `log`;
    stopped on exit if it still runs."""
    with (log or Path(os.devnull)).open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *host.command(argv), env=env, stderr=asyncio.subprocess.STDOUT,
            stdout=out if log else asyncio.subprocess.PIPE, limit=1 << 20)
    try:
        yield Pod(proc)
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()


async def test_the_leader_serves_only_once_every_worker_has_joined_its_ray_cluster(
        group_hosts: tuple[Host, Host, Path], stand_in_vllm: Path, tmp_path: Path) -> None:
    leader_host, worker_host, ray_files = group_hosts
    group = _group()
    size = group["size"]
    assert size == 2  # two hosts: the sample's group
    base = {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "PYTHONPATH": str(stand_in_vllm), "HOME": str(stand_in_vllm),
            # what the LeaderWorkerSet controller sets in every pod of the group
            "LWS_LEADER_ADDRESS": leader_host.address, "LWS_GROUP_SIZE": str(size)}
    leader_c = group["leaderTemplate"]["spec"]["containers"][0]
    worker_c = group["workerTemplate"]["spec"]["containers"][0]
    worker_log = tmp_path / "worker.log"
    leader_env = {**base, "LWS_WORKER_INDEX": "0", "RAY_TMPDIR": str(ray_files / "leader")}
    worker_env = {**base, "LWS_WORKER_INDEX": "1", "RAY_TMPDIR": str(ray_files / "worker")}
    async with running(leader_host, _argv(leader_c, leader_env), leader_env) as leader:
        await leader.until(WAITING)  # the head is up, and the group is not
        assert leader.proc.returncode is None and b"SERVED" not in leader.output
        async with running(worker_host, _argv(worker_c, worker_env), worker_env,
                           worker_log) as worker:
            line = await leader.until(b"SERVED ")
            async with asyncio.timeout(30):
                assert await leader.proc.wait() == 0  # the script exec'd the server
            # `ray start --block` keeps the worker's container in the foreground
            assert worker.proc.returncode is None, worker_log.read_text()

    served = json.loads(line.split(b"SERVED ", 1)[1])
    assert served["nodes"] == [leader_host.address, worker_host.address]
    assert served["argv"] == leader_c["args"][3:]  # "python3 -m <module>" then vLLM's own
    args = " ".join(served["argv"])
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2" in args
    assert args.endswith("--distributed-executor-backend ray")
