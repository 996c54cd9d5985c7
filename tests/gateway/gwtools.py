"""Helpers for gateway tests: a controllable clock, metric lookups, the gateway's own server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.server.http import GatewaySite

GatewayFactory = Callable[..., Any]  # the `gateway` fixture: await it to get (client, gateway)


class FakeTime:
    """A controllable clock and a sleep that only advances it (tests never really sleep)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def metric(gw: Gateway, name: str, **labels: str) -> float:
    value = gw.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


class GatewayServer(TestServer):
    """aiohttp's TestServer listening through the gateway's own server, as `llmop gateway`.

    The proxied POSTs are served by server.py; every other request's connection is handed
    to aiohttp's own server, as in production.
    """

    async def start_server(self, loop: asyncio.AbstractEventLoop | None = None,
                           **kwargs: Any) -> None:
        if self.runner:
            return
        self._loop = loop
        self.runner = await self._make_runner(handler_cancellation=True, **kwargs)
        await self.runner.setup()
        sock = self.socket_factory(self.host, self.port or 0, socket.AF_INET)
        self.host, self.port = sock.getsockname()[:2]
        assert isinstance(self.runner, web.AppRunner)
        await GatewaySite(self.runner, sock=sock).start()
        self.scheme = "http"
        self._root = URL(f"http://{self.host}:{self.port}")
