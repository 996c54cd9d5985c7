"""The fake vLLM (fake_vllm.py) as a process started the way vLLM's server is.

``python -m vllm.entrypoints.openai.api_server`` with tests/fake_vllm_module first on
PYTHONPATH starts ``main()``: it takes vLLM's flags (``--served-model-name``, ``--host``,
``--port``, ``--enable-sleep-mode``, ``--gpu-memory-utilization``; the rest are ignored)
and, in sleep mode with ``VLLM_SERVER_DEV_MODE=1``, serves /sleep, /wake_up and
/is_sleeping on an accelerator that the processes share through a file
(``FAKE_ACCELERATOR``): an engine holds its ``--gpu-memory-utilization`` of it while awake
and its CUDA context while asleep. Starting or waking beyond the whole fails as vLLM's
would.
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from fake_vllm import FakeVllm

CONTEXT = 0.01  # what an engine asleep keeps on the accelerator (its CUDA context)


class FileAccelerator:
    """One accelerator's memory, shared by the engine processes through a JSON file.

    The file holds each engine's share and whether it is awake, and ``most``: the most of
    the accelerator ever in use at once.
    """

    def __init__(self, path: Path, share: float) -> None:
        self.path, self.share = path, share

    @contextmanager
    def _state(self) -> Iterator[dict[str, Any]]:
        with open(self.path.with_suffix(".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = json.loads(self.path.read_text()) if self.path.exists() else {
                "engines": {}, "most": 0.0}
            yield state
            self.path.write_text(json.dumps(state))

    @staticmethod
    def _used(state: dict[str, Any], leaving: str) -> float:
        return sum(e["share"] if e["awake"] else CONTEXT
                   for name, e in state["engines"].items() if name != leaving)

    def _hold(self, state: dict[str, Any], model: str, awake: bool) -> bool:
        used = self._used(state, model) + (self.share if awake else CONTEXT)
        if used > 1.0 + 1e-9:
            return False
        state["engines"][model] = {"share": self.share, "awake": awake, "pid": os.getpid()}
        state["most"] = max(state["most"], used)
        return True

    def arrive(self, model: str, awake: bool) -> None:
        with self._state() as state:
            if not self._hold(state, model, awake):
                free = 1.0 - self._used(state, model)
                raise SystemExit(
                    f"ValueError: Free memory on device ({free:.2f} of the GPU) on startup "
                    f"is less than desired GPU memory utilization ({self.share:.2f})")

    def take(self, model: str) -> bool:
        with self._state() as state:
            return self._hold(state, model, True)

    def give(self, model: str) -> None:
        with self._state() as state:
            self._hold(state, model, False)

    def leave(self, model: str) -> None:
        with self._state() as state:
            state["engines"].pop(model, None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="vllm.entrypoints.openai.api_server (fake)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--served-model-name")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--enable-sleep-mode", action="store_true")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    args, _ = parser.parse_known_args()
    name = args.served_model_name or args.model
    room = None
    if args.enable_sleep_mode and os.environ.get("VLLM_SERVER_DEV_MODE") == "1":
        room = FileAccelerator(Path(os.environ["FAKE_ACCELERATOR"]),
                               args.gpu_memory_utilization)
    try:
        asyncio.run(_serve(FakeVllm(name, room), args.host, args.port))
    finally:
        if room is not None:
            room.leave(name)


async def _serve(fake: FakeVllm, host: str, port: int) -> None:
    async def health(_: web.Request) -> web.Response:
        return web.Response()

    fake.app.router.add_get("/health", health)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    ended: Callable[[], None] = stop.set
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, ended)
    await fake.start(port, host)
    print(f"fake vLLM serving {fake.base_model} on {host}:{port}", file=sys.stderr, flush=True)
    await stop.wait()
    await fake.stop()
