"""`llmop lora-sync` (a real process) keeps a vLLM-shaped engine's adapters matching its list."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from fake_vllm import FakeVllm, make_adapter

BASE = "meta-llama/Llama-3.2-3B-Instruct"
# Stands in for the `hf` CLI (no Hugging Face here): writes a PEFT adapter into --local-dir,
# notes whether it got a token, fails for acme/missing as hf does for an unknown repo.
FAKE_HF = """#!{python}
import json, os, pathlib, sys
_, command, repo, flag, target = sys.argv
with open({log!r}, "a") as log:
    log.write(json.dumps({{"repo": repo, "token": os.environ.get("HF_TOKEN")}}) + "\\n")
if repo == "acme/missing":
    sys.exit("huggingface_hub.errors.RepositoryNotFoundError: 404 Client Error. "
             "Repository Not Found for url: https://huggingface.co/api/models/acme/missing")
pathlib.Path(target).mkdir(parents=True, exist_ok=True)
(pathlib.Path(target) / "adapter_config.json").write_text('{{"r": 8}}')
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    proc: asyncio.subprocess.Process
    log: asyncio.Task[bytes]  # the rest of its stderr, drained as it comes


async def start(config: Path, engine_url: str, env: dict[str, str] | None = None
                ) -> tuple[Process, int]:
    """The real sidecar process, once it says it listens (its stderr is then drained)."""
    port = _free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "llm_operator", "lora-sync", "--config", str(config),
        "--engine", engine_url, "--host", "127.0.0.1", "--port", str(port),
        "--interval", "0.05", env=env, stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    async with asyncio.timeout(30):
        while b"lora-sync listening" not in (line := await proc.stderr.readline()):
            assert line, "lora-sync exited before listening"
    return Process(proc, asyncio.create_task(proc.stderr.read())), port


async def stop(process: Process) -> bytes:
    process.proc.terminate()
    await process.proc.wait()
    return await process.log


@dataclass
class Sidecar:
    engine: FakeVllm
    config: Path
    ready_url: str
    hf_log: Path
    http: aiohttp.ClientSession

    def write(self, entries: list[dict[str, str]]) -> None:
        """Replace the list as the kubelet does: a new file swapped in."""
        tmp = self.config.with_suffix(".tmp")
        tmp.write_text(json.dumps(entries))
        tmp.replace(self.config)

    async def report(self) -> tuple[int, dict[str, Any]]:
        try:
            async with self.http.get(self.ready_url) as r:
                return r.status, await r.json()
        except aiohttp.ClientError:
            return 0, {}

    async def until_loaded(self, names: dict[str, str]) -> None:
        async def check() -> bool:
            status, _ = await self.report()
            return status == 200 and self.engine.adapters == names
        await self.engine.until(check)

    def downloads(self) -> list[dict[str, Any]]:
        if not self.hf_log.exists():
            return []
        return [json.loads(line) for line in self.hf_log.read_text().splitlines()]


@pytest.fixture
async def sidecar(tmp_path: Path) -> AsyncIterator[Sidecar]:
    engine = FakeVllm(BASE)
    await engine.start()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    hf = bin_dir / "hf"
    hf_log = tmp_path / "hf.log"
    hf.write_text(FAKE_HF.format(python=sys.executable, log=str(hf_log)))
    hf.chmod(hf.stat().st_mode | stat.S_IEXEC)
    config = tmp_path / "adapters.json"
    config.write_text("[]")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "HF_TOKEN_ABC": "hf_secret_token_value"}
    proc, port = await start(config, engine.url, env)
    async with aiohttp.ClientSession() as http:
        yield Sidecar(engine, config, f"http://127.0.0.1:{port}/ready", hf_log, http)
    err = await stop(proc)
    await engine.stop()
    assert b"hf_secret_token_value" not in err  # a token never reaches the log


async def test_it_loads_unloads_and_reloads_without_restarting_the_engine(
        sidecar: Sidecar, tmp_path: Path) -> None:
    sql = str(make_adapter(tmp_path / "claims" / "sql"))
    docs = str(tmp_path / "cache" / "docs-1a2b3c4d")
    sidecar.write([{"name": "sql", "path": sql},
                   {"name": "docs", "path": docs, "repo": "acme/docs-lora"}])
    await sidecar.until_loaded({"sql": sql, "docs": docs})
    assert [d["repo"] for d in sidecar.downloads()] == ["acme/docs-lora"]

    # a removed adapter is unloaded, an added one loaded; the others stay as they are
    legal = str(make_adapter(tmp_path / "claims" / "legal"))
    sidecar.write([{"name": "docs", "path": docs, "repo": "acme/docs-lora"},
                   {"name": "legal", "path": legal}])
    await sidecar.until_loaded({"docs": docs, "legal": legal})
    assert sidecar.engine.calls[2:] == [("unload", "sql"), ("load", "legal")]

    # a changed source is a new path: unloaded, then loaded from there
    docs2 = str(tmp_path / "cache" / "docs-99999999")
    sidecar.write([{"name": "docs", "path": docs2, "repo": "acme/docs-lora-v2"},
                   {"name": "legal", "path": legal}])
    await sidecar.until_loaded({"docs": docs2, "legal": legal})
    assert sidecar.engine.calls[-2:] == [("unload", "docs"), ("load", "docs")]

    # the engine restarts (its runtime adapters are gone): they are loaded again, not
    # downloaded again
    downloads = len(sidecar.downloads())
    sidecar.engine.restart()
    await sidecar.until_loaded({"docs": docs2, "legal": legal})
    assert len(sidecar.downloads()) == downloads


async def test_a_bad_adapter_fails_alone_with_the_reason(sidecar: Sidecar,
                                                         tmp_path: Path) -> None:
    good = str(make_adapter(tmp_path / "good"))
    sidecar.write([{"name": "good", "path": good},
                   {"name": "nowhere", "path": str(tmp_path / "nowhere")},
                   {"name": "missing", "path": str(tmp_path / "missing"),
                    "repo": "acme/missing"},
                   {"name": "private", "path": str(tmp_path / "private"),
                    "repo": "acme/private", "tokenEnv": "HF_TOKEN_ABC"},
                   {"name": "no-token", "path": str(tmp_path / "nt"), "repo": "acme/nt",
                    "tokenEnv": "HF_TOKEN_UNSET"}])
    await sidecar.until_loaded({"good": good, "private": str(tmp_path / "private")})
    status, report = await sidecar.report()
    assert status == 200  # every adapter was tried: the model serves the ones that work
    states = report["adapters"]
    assert states["good"] == {"state": "loaded", "error": None}
    assert states["nowhere"]["state"] == "failed"
    assert "No adapter found for" in states["nowhere"]["error"]
    assert states["missing"]["state"] == "failed"
    assert "downloading acme/missing failed" in states["missing"]["error"]
    assert "Repository Not Found" in states["missing"]["error"]
    assert "HF_TOKEN_UNSET is empty" in states["no-token"]["error"]
    tokens = {d["repo"]: d["token"] for d in sidecar.downloads()}
    assert tokens["acme/private"] == "hf_secret_token_value"
    assert "hf_secret_token_value" not in json.dumps(report)


async def test_not_ready_until_the_engine_answers(tmp_path: Path) -> None:
    engine = FakeVllm(BASE)
    config = tmp_path / "adapters.json"
    adapter = str(make_adapter(tmp_path / "a"))
    config.write_text(json.dumps([{"name": "a", "path": adapter}]))
    engine_port = _free_port()
    proc, port = await start(config, f"http://127.0.0.1:{engine_port}")
    try:
        async with aiohttp.ClientSession() as http:
            async def report() -> tuple[int, dict[str, Any]]:
                async with http.get(f"http://127.0.0.1:{port}/ready") as r:
                    return r.status, await r.json()

            found = await report()
            assert found == (503, {"ready": False, "engine": "unreachable", "cycles": 0,
                                   "adapters": {"a": {"state": "pending", "error": None}}})
            await engine.start(engine_port)

            async def check() -> bool:
                return (await report())[0] == 200 and engine.adapters == {"a": adapter}
            await engine.until(check)
    finally:
        await stop(proc)
        await engine.stop()
