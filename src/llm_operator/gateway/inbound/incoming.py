"""What the request path reads of a request: aiohttp's ``web.Request`` or the gateway server's."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from multidict import CIMultiDictProxy


class Incoming(Protocol):
    """A request as the parts see it: the gateway server's (server/http.py) or aiohttp's."""

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def path_qs(self) -> str: ...

    @property
    def headers(self) -> CIMultiDictProxy[str]: ...

    @property
    def content_length(self) -> int | None: ...

    @property
    def remote(self) -> str | None: ...

    @property
    def transport(self) -> asyncio.Transport | None: ...

    async def read(self) -> bytes: ...


Handler = Callable[[Incoming], Awaitable[web.StreamResponse]]


async def prepare(response: web.StreamResponse, request: Incoming) -> None:
    """``response.prepare`` for either kind of request.

    The gateway's server's request carries what aiohttp's ``prepare`` reads of one (its method,
    headers, version, keep-alive and writer); it is not a ``web.BaseRequest``.
    """
    await response.prepare(request)  # type: ignore[arg-type]
