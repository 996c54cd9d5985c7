"""An upstream for flow-control tests: it answers each request once the test opens its gate."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from llm_operator.gateway.app import Gateway

from fake_upstream import completion


class GatedEngine:
    """An OpenAI-compatible upstream that answers a request only once the test opens it.

    Requests are named by their ``user`` field; ``arrived`` lists them in arrival order.
    """

    def __init__(self) -> None:
        self.arrived: list[str] = []
        self.headers: dict[str, dict[str, str]] = {}
        self._gates: dict[str, asyncio.Event] = {}
        # what its /metrics says, as llama-server's (waiting, running); None: a 404
        self.reported: tuple[int, int] | None = None
        self.looks = 0  # GET /metrics received
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self.handle)
        self.app.router.add_get("/metrics", self.metrics)

    async def metrics(self, _: web.Request) -> web.Response:
        self.looks += 1
        if self.reported is None:
            raise web.HTTPNotFound()
        waiting, running = self.reported
        return web.Response(text=f"llamacpp:requests_deferred {waiting}\n"
                                 f"llamacpp:requests_processing {running}\n")

    async def until_looked(self, count: int) -> None:
        """Until ``count`` more looks at /metrics than now have come."""
        target = self.looks + count
        async with asyncio.timeout(10):
            while self.looks < target:
                await asyncio.sleep(0.001)

    def gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = str(body.get("user", ""))
        self.arrived.append(name)
        self.headers[name] = dict(request.headers)
        await self.gate(name).wait()
        return web.json_response(completion(body["model"], text=name))

    async def until_arrived(self, count: int) -> None:
        async with asyncio.timeout(10):
            while len(self.arrived) < count:
                await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def serving(gateway: Gateway, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """``gateway`` served on ``host`` (a free port) until the block ends: its base URL."""
    runner = web.AppRunner(gateway.app(), handler_cancellation=True)  # as `llmop gateway`
    await runner.setup()
    site = web.TCPSite(runner, host, 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Requests a test left waiting: cancelled, and their ends awaited."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
