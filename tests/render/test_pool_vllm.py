"""A vLLM pool in a cluster: its objects (golden, official schemas) and its pod's script run.

The pod cannot run here (vLLM's sleep mode needs CUDA or ROCm), so its launcher runs as
the container would, against fake vLLM processes started the way vLLM's server is
(tests/fake_vllm_process.py) on an accelerator they share through a file, and the pool's
gateway (its rendered config) in front of them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.api.pools import pools
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import parse_llmmodel
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config
from llm_operator.profiles.pool import plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.render.pool_engine import pool_objects
from llm_operator.render.pool_vllm import gateway_config, gpu_fraction, launcher

from controlplane import ControlPlane
from k8s_schemas import validate_object
from samples import REPO, load_yaml

GOLDEN = Path(__file__).parent / "golden" / "model-pool-vllm.yaml"
POOL = REPO / "examples" / "cluster" / "model-pool-vllm"
TESTS = Path(__file__).resolve().parents[1]
FAKE_MODULE = TESTS / "fake_vllm_module"
START_SECONDS = 60.0  # every member started (each a Python process on a loaded machine)


def _members() -> list[LLMModel]:
    (group,) = pools([parse_llmmodel(load_yaml(p)) for p in sorted(POOL.glob("*.yaml"))]
                     ).values()
    return list(group)


def _objects() -> list[dict[str, Any]]:
    members = _members()
    return pool_objects(members, plan_pool(members), Settings())


@pytest.mark.parametrize(("pool", "sleep"), [
    ({}, {"group": "pool", "maxAwake": 2}),
    ({"minResidencySeconds": 60, "maxSwapsPerMinute": 4},
     {"group": "pool", "maxAwake": 2, "minAwakeSeconds": 60, "maxWakesPerMinute": 4}),
])
def test_the_pools_swap_policy_becomes_its_gateways_sleep_group_policy(
        pool: dict[str, Any], sleep: dict[str, Any]) -> None:
    members = [m.model_copy(update={"spec": m.spec.model_copy(update={
        "pool": m.spec.pool.model_copy(update={
            "min_residency_seconds": pool.get("minResidencySeconds"),
            "max_swaps_per_minute": pool.get("maxSwapsPerMinute")})})})
        for m in _members() if m.spec.pool is not None]
    routes = yaml.safe_load(gateway_config(members, 2))["routes"]
    assert {json.dumps(r["sleep"], sort_keys=True) for r in routes} == {
        json.dumps({**sleep, "group": routes[0]["sleep"]["group"]}, sort_keys=True)}
    parse_config(yaml.safe_load(gateway_config(members, 2)))  # as the pod's gateway reads it


def test_a_pinned_member_starts_last_and_is_left_awake() -> None:
    members = _members()
    pinned = members[0]
    assert pinned.spec.pool is not None
    members[0] = pinned.model_copy(update={"spec": pinned.spec.model_copy(update={
        "pool": pinned.spec.pool.model_copy(update={"pinned": True})})})
    script = launcher(members, 1, first_port=9001)
    started = re.findall(r"starting (\S+) on port (\d+)", script)
    slept = re.findall(r"^to_sleep (\d+)$", script, re.MULTILINE)
    assert started[-1] == (members[0].spec.model_id, "9001")  # its port, by name order
    assert "9001" not in slept and len(slept) == len(members) - 1


def test_the_example_vllm_pool_renders_as_its_golden_file(update_golden: bool) -> None:
    text = yaml.safe_dump_all(_objects(), sort_keys=False)
    if update_golden:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "model-pool-vllm changed: review, then `make golden`"


def test_every_vllm_pool_object_validates_against_official_schemas() -> None:
    assert [e for o in _objects() for e in validate_object(o)] == []


def test_the_example_members_are_admitted_by_the_real_apiserver(apiserver: ControlPlane
                                                                ) -> None:
    for path in sorted(POOL.glob("*.yaml")):
        doc = load_yaml(path)
        status, body = apiserver.request(
            "POST", "/apis/ai.example.io/v1alpha1/namespaces/default/llmmodels?dryRun=All",
            {**doc, "metadata": {**doc["metadata"], "namespace": "default"}})
        assert status == 201, f"{path.name}: {body}"


def test_the_pod_asks_host_memory_for_every_member_and_the_weights_asleep() -> None:
    members = _members()
    plan = plan_pool(members)
    (deployment,) = [o for o in _objects() if o["kind"] == "Deployment"]
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    own = sum(m.spec.resources.memory_gi_b for m in members)  # 3 x 8 GiB
    assert 0 < plan.asleep_gib < 3  # one member of ~1B parameters asleep, BF16
    assert server["resources"]["limits"]["memory"] == f"{own + 3}Gi"
    assert server["resources"]["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize(("members", "awake", "share"), [
    (3, 2, 0.44), (3, 1, 0.88), (2, 2, 0.45), (8, 1, 0.83)])
def test_the_awake_members_and_the_sleeping_ones_contexts_fit_the_accelerator(
        members: int, awake: int, share: float) -> None:
    assert gpu_fraction(members, awake) == share
    assert share * awake + 0.01 * (members - awake) <= 0.9


def _free_ports(count: int) -> int:
    """The first of ``count`` consecutive free loopback ports."""
    for base in range(20000 + os.getpid() % 20000, 60000, count):
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free ports")


@dataclass
class Pod:
    """The launcher as the pool-server container runs it, and what it shares."""

    process: asyncio.subprocess.Process
    accelerator: Path
    first_port: int

    def state(self) -> dict[str, Any]:
        return json.loads(self.accelerator.read_text())  # type: ignore[no-any-return]

    async def line(self, containing: str) -> str:
        """The first line of the launcher's output (both streams) with ``containing``."""
        assert self.process.stdout is not None
        async with asyncio.timeout(START_SECONDS):
            while True:
                raw = await self.process.stdout.readline()
                assert raw, f"the launcher ended (rc {await self.process.wait()}) " \
                    f"before saying {containing!r}"
                if containing in raw.decode():
                    return raw.decode()


async def _launch(tmp_path: Path, awake: int, taken: float = 0.0) -> Pod:
    """The launcher of the example's members; ``taken``: the accelerator's share in use."""
    first = _free_ports(3)
    script = tmp_path / "launch.sh"
    script.write_text(launcher(_members(), awake, first_port=first,
                               ready_file=str(tmp_path / "ready")))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python3 = bin_dir / "python3"  # the image's, here this virtualenv's
    python3.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    python3.chmod(0o755)
    accelerator = tmp_path / "accelerator.json"
    if taken:
        accelerator.write_text(json.dumps({"engines": {"other": {
            "share": taken, "awake": True, "pid": 0}}, "most": taken}))
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join([str(FAKE_MODULE), str(TESTS)]),
           "FAKE_ACCELERATOR": str(accelerator)}
    process = await asyncio.create_subprocess_exec(
        "bash", str(script), env=env, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    return Pod(process, accelerator, first)


@pytest.fixture
async def pods() -> AsyncIterator[list[Pod]]:
    started: list[Pod] = []
    yield started
    for pod in started:
        if pod.process.returncode is None:
            os.killpg(pod.process.pid, signal.SIGTERM)
        await pod.process.wait()


async def test_the_launcher_starts_each_member_and_the_gateway_takes_turns_between_them(
        tmp_path: Path, pods: list[Pod]) -> None:
    pod = await _launch(tmp_path, awake=2)
    pods.append(pod)
    await pod.line("the pool serves: 3 members started, 2 awake")
    assert (tmp_path / "ready").exists()  # the container's probes pass from now
    engines = pod.state()["engines"]
    assert {m: e["awake"] for m, e in engines.items()} == {
        "gemma-3-1b-it": False, "llama-3.2-1b-instruct": True, "qwen3-0.6b": True}

    config = yaml.safe_load(gateway_config(_members(), 2, first_port=pod.first_port))
    gateway = Gateway(parse_config(config))
    client: TestClient[Any, Any] = TestClient(TestServer(gateway.app(), host="127.0.0.1"))
    await client.start_server()
    try:
        status = await (await client.get("/models")).json()
        assert {m["id"]: m["status"]["value"] for m in status["data"]} == {
            "gemma-3-1b-it": "unloaded", "llama-3.2-1b-instruct": "loaded",
            "qwen3-0.6b": "loaded"}
        for model in ("gemma-3-1b-it", "qwen3-0.6b", "llama-3.2-1b-instruct",
                      "gemma-3-1b-it"):
            resp = await client.post("/v1/chat/completions", json={
                "model": model, "messages": [{"role": "user", "content": "hello"}]})
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["choices"][0]["message"]["content"] == \
                f"answered by {model}"
        awake = {m for m, e in pod.state()["engines"].items() if e["awake"]}
        assert awake == {"gemma-3-1b-it", "llama-3.2-1b-instruct"}  # qwen3 least recent
        assert pod.state()["most"] <= 0.9  # never beyond what the launcher gave them
    finally:
        await client.close()

    member = pod.state()["engines"]["qwen3-0.6b"]["pid"]
    os.kill(member, signal.SIGKILL)  # a member ends: the container ends, to be restarted
    await pod.line("a member of the pool exited")
    assert await pod.process.wait() == 1


async def test_a_member_that_cannot_start_ends_the_launcher_saying_which(
        tmp_path: Path, pods: list[Pod]) -> None:
    # another process holds half the accelerator: the second member awake has no room
    pod = await _launch(tmp_path, awake=2, taken=0.5)
    pods.append(pod)
    said = await pod.line("exited while starting")
    assert f"member on port {pod.first_port + 2} exited while starting" in said
    assert await pod.process.wait() == 1


async def test_a_pod_stopped_stops_its_members_and_ends_cleanly(
        tmp_path: Path, pods: list[Pod]) -> None:
    pod = await _launch(tmp_path, awake=1)
    pods.append(pod)
    await pod.line("the pool serves: 3 members started, 1 awake")
    assert len(pod.state()["engines"]) == 3
    pod.process.send_signal(signal.SIGTERM)  # the kubelet, to the container's PID 1
    assert await pod.process.wait() == 0
    assert pod.state()["engines"] == {}  # each member left the accelerator as it ended
