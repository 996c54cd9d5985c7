"""A loopback stand-in for vLLM's OpenAI server: its LoRA adapter API and real metric names.

It answers like vLLM's documented endpoints (and, given an Accelerator, its sleep mode's
/sleep, /wake_up and /is_sleeping, refusing a wake the accelerator has no room for):
/v1/models lists the base model and each loaded adapter (``parent`` = the base, ``root`` =
its path); /v1/load_lora_adapter and /v1/unload_lora_adapter take ``lora_name`` /
``lora_path`` and answer vLLM's messages and status codes (400 already loaded or no
adapter at the path, 404 unknown); a chat completion names the adapter that served it.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

ADAPTER_CONFIG = "adapter_config.json"  # what a PEFT adapter directory holds


def host_ip() -> str:
    """This machine's own address, for a fake replica a pod IP points at.

    EndpointSlices refuse loopback addresses.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: it only picks a route
        return str(probe.getsockname()[0])


class Accelerator:
    """What several fakes in sleep mode share: room for ``holds`` of them awake.

    A wake beyond it fails as vLLM's would, with CUDA out of memory; ``most`` is the most
    ever awake at once.
    """

    def __init__(self, holds: int) -> None:
        self.holds, self.awake, self.most = holds, 0, 0
        self.changes: list[tuple[str, str]] = []  # (sleep|wake, model), in order

    def arrive(self, model: str, awake: bool) -> None:
        """An engine started on it, awake or (as a launcher leaves it) asleep."""
        if awake:
            self.awake += 1
            self.most = max(self.most, self.awake)

    def take(self, model: str) -> bool:
        """Room for ``model`` woken; False: CUDA out of memory."""
        if self.awake >= self.holds:
            return False
        self.awake += 1
        self.most = max(self.most, self.awake)
        self.changes.append(("wake", model))
        return True

    def give(self, model: str) -> None:
        """``model`` put to sleep: its room freed."""
        self.awake -= 1
        self.changes.append(("sleep", model))


class Room(Protocol):
    """What a fake in sleep mode asks of its accelerator (Accelerator, or one shared by
    processes)."""

    def arrive(self, model: str, awake: bool) -> None: ...

    def take(self, model: str) -> bool: ...

    def give(self, model: str) -> None: ...


class FakeVllm:
    def __init__(self, base_model: str, accelerator: Room | None = None, *,
                 asleep: bool = False) -> None:
        """``accelerator``: the engine runs with --enable-sleep-mode on it (``asleep``: as
        a launcher that starts the engines in turn leaves those beyond the first few)."""
        self.base_model = base_model
        self.accelerator = accelerator
        self.sleeping = asleep
        if accelerator is not None:
            accelerator.arrive(base_model, not asleep)
        self.adapters: dict[str, str] = {}  # name -> path
        self.calls: list[tuple[str, str]] = []  # (action, name), in order
        self.changed = asyncio.Event()  # set on every load or unload
        self._seen = asyncio.Event()  # set on every request
        self.app = web.Application(middlewares=[self._note])
        self.app.router.add_get("/v1/models", self._models)
        self.app.router.add_post("/v1/load_lora_adapter", self._load)
        self.app.router.add_post("/v1/unload_lora_adapter", self._unload)
        self.app.router.add_post("/v1/chat/completions", self._chat)
        self.app.router.add_get("/metrics", self._metrics)
        if accelerator is not None:  # vLLM serves these with VLLM_SERVER_DEV_MODE=1
            self.app.router.add_post("/sleep", self._sleep)
            self.app.router.add_post("/wake_up", self._wake_up)
            self.app.router.add_get("/is_sleeping", self._is_sleeping)
        self.in_flight = 0  # chat completions being answered
        self.arrived = asyncio.Event()  # set when a chat completion starts being answered
        self.wake_asked = asyncio.Event()  # set when /wake_up is called
        self.wake_gate: asyncio.Event | None = None  # set: /wake_up waits until it is set
        self.waiting = self.running = 0  # what /metrics reports of the queue
        self.kv_usage = 0.0
        self.served: list[str] = []  # the model of every chat completion answered
        self.hold: asyncio.Event | None = None  # set: chat completions wait until it is set
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.host = "127.0.0.1"

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        self.host = host
        self._runner = web.AppRunner(self.app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _note(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            return await handler(request)  # type: ignore[no-any-return]
        finally:
            self._seen.set()

    async def until(self, check: Callable[[], Awaitable[bool]], timeout: float = 30) -> None:
        """Wait until ``check()`` holds; re-checked after every request the fake answers."""
        async with asyncio.timeout(timeout):
            while not await check():
                self._seen.clear()
                await self._seen.wait()

    def restart(self) -> None:
        """What a vLLM restart does to runtime-loaded adapters: they are gone."""
        self.adapters.clear()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def _models(self, _: web.Request) -> web.Response:
        cards: list[dict[str, Any]] = [{"id": self.base_model, "object": "model",
                                        "root": self.base_model, "parent": None}]
        cards += [{"id": name, "object": "model", "root": path, "parent": self.base_model}
                  for name, path in self.adapters.items()]
        return web.json_response({"object": "list", "data": cards})

    @staticmethod
    def _error(message: str, status: int, kind: str) -> web.Response:
        return web.json_response({"object": "error", "message": message, "type": kind,
                                  "param": None, "code": status}, status=status)

    async def _load(self, request: web.Request) -> web.Response:
        body = await request.json()
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return self._error("Both 'lora_name' and 'lora_path' must be provided.", 400,
                               "InvalidUserInput")
        if name in self.adapters:
            return self._error(f"The lora adapter '{name}' has already been loaded. If you "
                               "want to load the adapter in place, set 'load_inplace' to "
                               "True.", 400, "InvalidUserInput")
        if not (Path(path) / ADAPTER_CONFIG).is_file():
            return self._error(f"Loading lora {name} failed: No adapter found for {path}",
                               400, "BadRequestError")
        self.adapters[name] = path
        self.calls.append(("load", name))
        self.changed.set()
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload(self, request: web.Request) -> web.Response:
        name = (await request.json()).get("lora_name")
        if name not in self.adapters:
            return self._error(f"The lora adapter '{name}' cannot be found.", 404,
                               "NotFoundError")
        del self.adapters[name]
        self.calls.append(("unload", name))
        self.changed.set()
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def _metrics(self, _: web.Request) -> web.Response:
        label = f'{{model_name="{self.base_model}"}}'
        return web.Response(text=(
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{label} {self.waiting}\n"
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{label} {self.running}\n"
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{label} {self.kv_usage}\n"), content_type="text/plain")

    async def _sleep(self, request: web.Request) -> web.Response:
        assert self.accelerator is not None
        if request.query.get("level", "1") != "1":
            return self._error("this fake sleeps at level 1 only", 400, "BadRequestError")
        if self.in_flight:  # what a gateway must never do: a request would be cut
            return self._error(f"{self.in_flight} request(s) running", 500, "InternalError")
        if not self.sleeping:
            self.sleeping = True
            self.accelerator.give(self.base_model)
        return web.Response()

    async def _wake_up(self, _: web.Request) -> web.Response:
        accelerator = self.accelerator
        assert accelerator is not None
        self.wake_asked.set()
        if self.wake_gate is not None:
            await self.wake_gate.wait()
        if self.sleeping:
            if not accelerator.take(self.base_model):
                return self._error("CUDA out of memory. Tried to allocate 2.00 GiB", 500,
                                   "OutOfMemoryError")
            self.sleeping = False
        return web.Response()

    async def _is_sleeping(self, _: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": self.sleeping})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        model = body.get("model")
        if model != self.base_model and model not in self.adapters:
            return self._error(f"The model `{model}` does not exist.", 404, "NotFoundError")
        if self.sleeping:
            return self._error("the engine is sleeping", 500, "InternalError")
        self.in_flight += 1
        self.arrived.set()
        try:
            return await self._answer(request, body, model)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request, body: dict[str, Any], model: str
                      ) -> web.StreamResponse:
        self.served.append(model)
        if self.hold is not None:
            await self.hold.wait()
        if body.get("stream"):
            out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await out.prepare(request)
            for word in ("answered", " by", f" {model}"):
                chunk = {"id": "c", "object": "chat.completion.chunk", "model": model,
                         "choices": [{"index": 0, "delta": {"content": word}}]}
                await out.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await out.write(b"data: [DONE]\n\n")
            await out.write_eof()
            return out
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": f"answered by {model}"}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})


def make_adapter(directory: Path) -> Path:
    """A PEFT-shaped adapter directory (the fake only checks the config is there)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / ADAPTER_CONFIG).write_text('{"r": 8, "peft_type": "LORA"}\n')
    return directory
