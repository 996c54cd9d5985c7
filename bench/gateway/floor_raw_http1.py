"""Floor, no server library: an asyncio protocol parsing with httptools, the gateway's client.

    python bench/gateway/floor_raw_http1.py PORT UPSTREAM_URL

The same hot path as floor_aiohttp_http1.py on the least a Python server can do per
request (no error handling, keep-alive only): what replacing aiohttp's server could save.
"""

from __future__ import annotations

import asyncio
import json
import sys

import httptools

from llm_operator.gateway.upstream.http1 import UpstreamClient

UPSTREAM = sys.argv[2]
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
TASKS: set[asyncio.Task[None]] = set()


class Proxy(asyncio.Protocol):
    def __init__(self, client: UpstreamClient) -> None:
        self.client = client
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        task = asyncio.get_running_loop().create_task(self.answer(b"".join(self.body)))
        TASKS.add(task)
        task.add_done_callback(TASKS.discard)

    async def answer(self, raw: bytes) -> None:
        body = json.loads(raw)
        body["model"] = "bench-upstream"
        answer = await self.client.post(UPSTREAM, json.dumps(body).encode(), HEADERS,
                                        connect_timeout=5, total=60)
        data = await answer.read()
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 %d OK\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (answer.status, len(data), data))


async def main() -> None:
    client = UpstreamClient()
    server = await asyncio.get_running_loop().create_server(
        lambda: Proxy(client), "127.0.0.1", int(sys.argv[1]))
    await server.serve_forever()


asyncio.run(main())
