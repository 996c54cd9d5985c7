"""A real OpenAI-compatible HTTP server on loopback whose answers each test scripts."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class Reply:
    """One scripted answer: a status and JSON body, or an SSE stream of chunks."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] | None = None  # SSE: sent one by one
    chunk_gap: float = 0.0  # seconds between chunks (lets a test disconnect mid-stream)
    delay: float = 0.0  # before answering
    hold: asyncio.Event | None = None  # before answering, until the test sets it
    opening_delay: float = 0.0  # a stream: after its headers, before its first chunk
    drop_after: int | None = None  # close the connection after this many chunks (a JSON
    # body: after half of it)
    raw: bytes | None = None  # a body sent as it is (not JSON), instead of ``body``


def completion(model: str, text: str = "Hello!", prompt: int = 11,
               completion_tokens: int = 3) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion_tokens,
                      "total_tokens": prompt + completion_tokens}}


def sse_chunks(model: str, words: list[str], usage: tuple[int, int] | None = (7, 4)
               ) -> list[bytes]:
    chunks = []
    for word in words:
        event = {"id": "c", "object": "chat.completion.chunk", "model": model,
                 "choices": [{"index": 0, "delta": {"content": word}}]}
        chunks.append(f"data: {json.dumps(event)}\n\n".encode())
    if usage:
        event = {"id": "c", "object": "chat.completion.chunk", "model": model, "choices": [],
                 "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]}}
        chunks.append(f"data: {json.dumps(event)}\n\n".encode())
    chunks.append(b"data: [DONE]\n\n")
    return chunks


class FakeUpstream:
    """Records every request; answers from a script, else a plain completion."""

    def __init__(self) -> None:
        self.script: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.stream_cancelled = asyncio.Event()
        self.cancelled = asyncio.Event()  # a delayed answer's client (the gateway) went away
        self.received = asyncio.Event()  # set on every request
        self.app = web.Application()
        self.app.router.add_post("/v1/{tail:.*}", self.handle)

    def then(self, *replies: Reply) -> FakeUpstream:
        self.script.extend(replies)
        return self

    async def _wait(self, seconds: float, until: asyncio.Event | None = None) -> None:
        """A scripted pause (then, with ``until``, until the test sets it); the gateway
        cancelling it (its client left) is noted."""
        if not seconds and until is None:
            return
        try:
            await asyncio.sleep(seconds)
            if until is not None:
                await until.wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"path": request.path, "query": dict(request.query),
                              "headers": dict(request.headers), "body": body})
        self.received.set()
        reply = self.script.popleft() if self.script else Reply(body=completion(
            body.get("model", "")))
        await self._wait(reply.delay, reply.hold)
        if reply.chunks is None and reply.drop_after is not None:  # half a body, then cut
            payload = json.dumps(reply.body).encode()
            response = web.StreamResponse(status=reply.status, headers={
                "Content-Type": "application/json", "Content-Length": str(len(payload)),
                **reply.headers})
            await response.prepare(request)
            await response.write(payload[:len(payload) // 2])
            assert request.transport is not None
            request.transport.close()
            return response
        if reply.chunks is None and reply.raw is not None:
            return web.Response(body=reply.raw, status=reply.status, headers=reply.headers)
        if reply.chunks is None:
            return web.json_response(reply.body, status=reply.status, headers=reply.headers)
        response = web.StreamResponse(status=reply.status, headers={
            "Content-Type": "text/event-stream", **reply.headers})
        await response.prepare(request)
        await self._wait(reply.opening_delay)
        try:
            for index, chunk in enumerate(reply.chunks):
                if reply.drop_after is not None and index == reply.drop_after:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                await response.write(chunk)
                if reply.chunk_gap:
                    await asyncio.sleep(reply.chunk_gap)
        except (asyncio.CancelledError, ConnectionResetError):
            self.stream_cancelled.set()
            raise
        await response.write_eof()
        return response
