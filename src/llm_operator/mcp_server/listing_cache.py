"""Whole tools/list answers of the stateless paths, replayed under each request's own id.

The SDK validates, dumps and encodes a 150 KB page on every request (about 6 ms of CPU at
100 tools), so 200 concurrent listings queued for over a second. A page only changes with
the catalog: the first request of a kind is answered by the SDK and its answer kept; the
same request (same headers that matter, same params, same caller allowance) then gets the
same bytes with its own JSON-RPC id, until the catalog changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

MAX_ENTRIES = 256  # keys come from clients (params): bound what they can make us keep
# Request headers that can change the SDK's answer (version ladder, method check, framing).
VARYING = (b"mcp-protocol-version", b"mcp-method", b"accept", b"content-type")
KEPT_HEADERS = frozenset({b"content-type"})


def listing_key(scope: Scope, message: dict[str, Any], allowance: Hashable
                ) -> tuple[Hashable, ...] | None:
    """What identifies a cacheable tools/list request; None when it is not one."""
    if message.get("method") != "tools/list" or "id" not in message:
        return None
    headers = dict(scope["headers"])
    if b"mcp-session-id" in headers:
        return None  # a session's answer depends on the session: the SDK decides
    try:
        params = json.dumps(message.get("params"), sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return None
    return (*(headers.get(h) for h in VARYING), params, allowance)


class ListingCache:
    """Answers kept per catalog version; ``version`` reads the catalog's current one."""

    def __init__(self, version: Callable[[], int]) -> None:
        self._version = version
        self._at = -1
        self._entries: dict[tuple[Hashable, ...], tuple[list[tuple[bytes, bytes]], bytes]] = {}
        self.hits = 0

    async def serve(self, key: tuple[Hashable, ...], request_id: Any, app: ASGIApp,
                    asgi: tuple[Scope, Receive, Send]) -> None:
        """Replay the kept answer, or let ``app`` answer and keep a successful JSON one."""
        scope, receive, send = asgi
        version = self._version()
        if version != self._at:
            self._entries.clear()
            self._at = version
        entry = self._entries.get(key)
        if entry is not None:
            self.hits += 1
            headers, result = entry
            body = b'{"jsonrpc":"2.0","id":%s,"result":%s}' % (
                json.dumps(request_id).encode(), result)
            await send({"type": "http.response.start", "status": 200, "headers": [
                *headers, (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        start: Message | None = None
        chunks: list[bytes] = []

        async def keep(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
            await send(message)

        await app(scope, receive, keep)
        if start is not None and self._version() == version:
            self._keep(key, request_id, start, b"".join(chunks))

    def _keep(self, key: tuple[Hashable, ...], request_id: Any, start: Message,
              body: bytes) -> None:
        headers = [(k.lower(), v) for k, v in start.get("headers", [])]
        if start["status"] != 200 or (b"content-type", b"application/json") not in headers:
            return  # errors and SSE framing are not replayed
        try:
            answer = json.loads(body)
        except ValueError:
            return
        if not isinstance(answer, dict) or answer.get("id") != request_id \
                or "result" not in answer:
            return
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        result = json.dumps(answer["result"], separators=(",", ":")).encode()
        self._entries[key] = ([h for h in headers if h[0] in KEPT_HEADERS], result)
