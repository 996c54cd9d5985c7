"""The LoRA sidecar: keeps vLLM's loaded adapters matching their list, without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from llm_operator.profiles.adapters import (
    SyncStep,
    loaded_adapters,
    parse_sync_list,
    sync_steps,
)

log = logging.getLogger("llmop.lora-sync")
MARKER = ".llmop-complete"  # in an adapter's directory once its download finished
RETRY_MIN, RETRY_MAX = 5.0, 300.0


@dataclass
class AdapterState:
    """What lora-sync knows of one adapter (GET /ready shows it)."""

    state: str = "pending"  # pending, downloading, loaded, failed
    error: str | None = None
    failures: int = 0
    retry_at: float = 0.0


class SyncError(RuntimeError):
    """A step failed; the message says why (never a token)."""


class LoraSync:
    """Level-triggered: each cycle reads the list and the engine's adapters and converges."""

    def __init__(self, config: Path, engine: str, download_timeout: float = 3600.0,
                 hf_command: str = "hf") -> None:
        self.config = config
        self.engine = engine.rstrip("/")
        self.download_timeout = download_timeout
        self.hf_command = hf_command
        self.desired: list[dict[str, str]] = []
        self.states: dict[str, AdapterState] = {}
        self.engine_up = False
        self.ready = False  # the engine answered and every listed adapter was tried
        self.cycles = 0

    def report(self) -> dict[str, Any]:
        return {"ready": self.ready, "engine": "up" if self.engine_up else "unreachable",
                "cycles": self.cycles,
                "adapters": {e["name"]: {"state": self.states[e["name"]].state,
                                         "error": self.states[e["name"]].error}
                             for e in self.desired if e["name"] in self.states}}

    def _read_list(self) -> None:
        try:
            desired = parse_sync_list(self.config.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.error("cannot use the adapter list %s (keeping the last good one): %s",
                      self.config, exc)
            return
        self.desired = desired
        names = {e["name"] for e in desired}
        self.states = {n: s for n, s in self.states.items() if n in names}
        for name in names:
            self.states.setdefault(name, AdapterState())

    async def cycle(self, http: aiohttp.ClientSession) -> None:
        self._read_list()
        try:
            async with http.get(f"{self.engine}/v1/models") as r:
                r.raise_for_status()
                loaded = loaded_adapters(await r.json())
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if self.engine_up:
                log.warning("the engine at %s does not answer: %s", self.engine, exc)
            self.engine_up = False
            return
        self.engine_up = True
        for name in loaded.keys() & self.states.keys():
            if loaded[name] == self._entry(name)["path"]:
                self.states[name].state, self.states[name].error = "loaded", None
        now = time.monotonic()
        for step in sync_steps(self.desired, loaded):
            state = self.states.get(step.name)
            if step.action == "load" and state is not None and state.retry_at > now:
                continue
            try:
                await self._apply(http, step)
            except SyncError as exc:
                assert state is not None  # only listed adapters are loaded
                state.state, state.error, state.failures = "failed", str(exc), \
                    state.failures + 1
                state.retry_at = now + min(RETRY_MAX, RETRY_MIN * 2 ** (state.failures - 1))
                log.error("adapter %s: %s", step.name, exc)
            else:
                if state is not None and step.action == "load":
                    state.state, state.error, state.failures = "loaded", None, 0
                    log.info("adapter %s loaded from %s", step.name, step.path)
                elif step.action == "unload":
                    log.info("adapter %s unloaded", step.name)
        self.cycles += 1
        self.ready = all(s.state in ("loaded", "failed") for s in self.states.values())

    def _entry(self, name: str) -> dict[str, str]:
        return next(e for e in self.desired if e["name"] == name)

    async def _apply(self, http: aiohttp.ClientSession, step: SyncStep) -> None:
        if step.action == "unload":
            status, message = await _post(http, f"{self.engine}/v1/unload_lora_adapter",
                                          {"lora_name": step.name})
            if status >= 400 and status != 404:  # 404: already gone
                raise SyncError(f"vLLM refused to unload it (HTTP {status}): {message}")
            return
        entry = self._entry(step.name)
        if entry.get("repo"):
            self.states[step.name].state = "downloading"
            await self._download(entry)
        status, message = await _post(http, f"{self.engine}/v1/load_lora_adapter",
                                      {"lora_name": step.name, "lora_path": entry["path"]})
        if status >= 400 and "already been loaded" not in message:
            raise SyncError(f"vLLM could not load it from {entry['path']} (HTTP {status}): "
                            f"{message}")

    async def _download(self, entry: dict[str, str]) -> None:
        """``hf download`` the repo into the adapter's directory, once (a marker says so)."""
        target = Path(entry["path"])
        marker = target / MARKER
        repo = entry["repo"]
        with contextlib.suppress(OSError):
            if marker.read_text(encoding="utf-8").strip() == repo:
                return
        env = dict(os.environ)
        token_env = entry.get("tokenEnv")
        if token_env:
            token = os.environ.get(token_env)
            if not token:
                raise SyncError(f"its Hugging Face token is missing (variable {token_env} "
                                "is empty: check the Secret named in huggingFaceTokenSecret)")
            env["HF_TOKEN"] = token
        target.mkdir(parents=True, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                self.hf_command, "download", repo, "--local-dir", str(target), env=env,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            raise SyncError(f"cannot run {self.hf_command}: {exc}") from None
        try:
            async with asyncio.timeout(self.download_timeout):
                _, err = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise SyncError(f"downloading {repo} took over {self.download_timeout:g} s") \
                from None
        if proc.returncode != 0:
            tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise SyncError(f"downloading {repo} failed: {tail[0][:500]}")
        marker.write_text(repo + "\n", encoding="utf-8")


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, str]
                ) -> tuple[int, str]:
    try:
        async with http.post(url, json=body) as r:
            status, text = r.status, await r.text(errors="replace")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise SyncError(f"the engine did not answer {url}: {type(exc).__name__}") from None
    with contextlib.suppress(ValueError):
        payload = json.loads(text)
        if isinstance(payload, dict) and isinstance(payload.get("message"), str):
            text = payload["message"]
        elif isinstance(payload, dict) and isinstance(payload.get("error"), dict):
            text = str(payload["error"].get("message", text))
    return status, text.strip()[:1000]


async def serve(sync: LoraSync, host: str, port: int, interval: float,
                stop: asyncio.Event) -> None:
    """Converge every ``interval`` seconds, and answer GET /ready, until ``stop``."""
    async def ready(_: web.Request) -> web.Response:
        return web.json_response(sync.report(), status=200 if sync.ready else 503)

    app = web.Application()
    app.router.add_get("/ready", ready)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("lora-sync listening on %s:%d, following %s", host, port, sync.config)
    timeout = aiohttp.ClientTimeout(total=600, sock_connect=5)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while not stop.is_set():
                await sync.cycle(http)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), interval)
    finally:
        await runner.cleanup()
