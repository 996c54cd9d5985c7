"""tools/list_changed to every client of either protocol era (listen streams and GET streams)."""

from __future__ import annotations

import logging
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ToolsListChanged
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger(__name__)
SESSION_HEADER = "mcp-session-id"
MAX_SESSIONS = 10_000  # the SDK's own default session limit


class Broadcaster:
    """Fans a tool-list change out to both eras.

    2026-07-28 clients hold a ``subscriptions/listen`` stream fed by the SDK's bus.
    2025-11-25 clients hold a GET stream per session; the SDK does not broadcast to those,
    so the middleware remembers each session (from its first request after initialize)
    and the ASGI wrapper tracks which sessions have their GET stream open right now.
    """

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self._sessions: dict[str, ServerSession] = {}
        self._open_streams: dict[str, int] = {}
        self._listeners_changed = anyio.Event()

    # --- bookkeeping ---

    def legacy_listeners(self) -> int:
        return sum(1 for sid in self._open_streams if sid in self._sessions)

    async def wait_listeners(self, count: int) -> None:
        """Until at least ``count`` legacy sessions have a GET stream open (tests, bench)."""
        while self.legacy_listeners() < count:
            await self._listeners_changed.wait()

    def _changed(self) -> None:
        self._listeners_changed.set()
        self._listeners_changed = anyio.Event()

    async def middleware(self, ctx: ServerRequestContext[Any, Any],
                         call_next: CallNext) -> HandlerResult:
        """Server middleware: remember handshake-era sessions by their session id."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        sid = headers.get(SESSION_HEADER) if headers is not None else None
        if sid and sid not in self._sessions and ctx.protocol_version != "2026-07-28":
            if len(self._sessions) >= MAX_SESSIONS:  # drop the oldest session without a stream
                idle = next((s for s in self._sessions if s not in self._open_streams), None)
                self._sessions.pop(idle or next(iter(self._sessions)))
            self._sessions[sid] = ctx.session
            self._changed()
        return await call_next(ctx)

    def track_streams(self, app: ASGIApp) -> ASGIApp:
        """Wrap the MCP endpoint: note GET streams from their first response frame to the end."""

        async def tracked(scope: Scope, receive: Receive, send: Send) -> None:
            headers = dict(scope.get("headers") or [])
            sid_raw = headers.get(SESSION_HEADER.encode())
            if sid_raw is None or scope.get("method") not in ("GET", "DELETE"):
                await app(scope, receive, send)
                return
            sid = sid_raw.decode("latin-1")
            if scope["method"] == "DELETE":  # the client ends its session
                await app(scope, receive, send)
                self.forget(sid)
                return
            opened = False

            async def watching_send(message: Message) -> None:
                nonlocal opened
                await send(message)
                if message["type"] == "http.response.start" and message["status"] == 200:
                    opened = True
                    self._open_streams[sid] = self._open_streams.get(sid, 0) + 1
                    self._changed()

            try:
                await app(scope, receive, watching_send)
            finally:
                if opened:
                    left = self._open_streams.get(sid, 1) - 1
                    if left > 0:
                        self._open_streams[sid] = left
                    else:
                        self._open_streams.pop(sid, None)
                    self._changed()

        return tracked

    # --- fan-out ---

    async def tools_changed(self) -> None:
        await self.bus.publish(ToolsListChanged())
        for sid in [s for s in self._open_streams if s in self._sessions]:
            session = self._sessions.get(sid)
            if session is None:
                continue
            try:
                await session.send_tool_list_changed()
            except Exception as exc:  # a session that went away must not stop the others
                log.debug("dropping session %s… from notifications: %s", sid[:8], exc)
                self._sessions.pop(sid, None)

    def forget(self, sid: str) -> None:
        self._sessions.pop(sid, None)

