"""Floor, a front of our own that keeps aiohttp's answers: httptools parses, aiohttp writes.

    python bench/gateway/floor_front_http1.py PORT UPSTREAM_URL

The same hot path as floor_aiohttp_http1.py and floor_raw_http1.py, served by an asyncio
protocol that parses with httptools and hands the handler a request object carrying only
what aiohttp's ``web.Response.prepare`` reads of a request (its method, headers, keep-alive,
version, writer). The answer is aiohttp's own ``web.Response``, written by aiohttp's own
``StreamWriter``: what a front door could save while the gateway's parts keep answering
with aiohttp's response types (bench/gateway/instructions.py --floors counts it).
"""

from __future__ import annotations

import asyncio
import json
import sys

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.http_writer import HttpVersion11, StreamWriter
from multidict import CIMultiDict, CIMultiDictProxy

from llm_operator.gateway.upstream.http1 import UpstreamClient

UPSTREAM = sys.argv[2]
HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
TASKS: set[asyncio.Task[None]] = set()


class Incoming:
    """One parsed request: what the handler and ``web.Response.prepare`` read of it."""

    def __init__(self, method: str, path: str, headers: CIMultiDict[str], body: bytes, *,
                 keep_alive: bool, writer: StreamWriter) -> None:
        self.method, self.path, self.body = method, path, body
        self.headers = CIMultiDictProxy(headers)
        self.keep_alive, self.version = keep_alive, HttpVersion11
        self._payload_writer = writer
        self.task: asyncio.Task[None] | None = None

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        """The on_response_prepare signal of aiohttp's application: none here."""


class Front(BaseProtocol):
    """Parses requests with httptools; each answered by ``answer`` in a task of its own."""

    def __init__(self, loop: asyncio.AbstractEventLoop, client: UpstreamClient) -> None:
        super().__init__(loop)
        self.client = client
        self.parser = httptools.HttpRequestParser(self)
        self.url: bytes = b""
        self.body: list[bytes] = []
        self.headers: CIMultiDict[str] = CIMultiDict()

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_begin(self) -> None:
        self.url, self.body, self.headers = b"", [], CIMultiDict()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.add(name.decode("latin-1"), value.decode("latin-1"))

    def on_body(self, chunk: bytes) -> None:
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        request = Incoming(self.parser.get_method().decode(), self.url.decode(), self.headers,
                           b"".join(self.body), keep_alive=self.parser.should_keep_alive(),
                           writer=StreamWriter(self, self._loop))
        task = self._loop.create_task(answer(self.client, request))
        request.task = task
        TASKS.add(task)
        task.add_done_callback(TASKS.discard)


async def answer(client: UpstreamClient, request: Incoming) -> None:
    body = json.loads(request.body)
    body["model"] = "bench-upstream"
    upstream = await client.post(UPSTREAM, json.dumps(body).encode(), HEADERS,
                                 connect_timeout=5, total=60)
    response = web.Response(body=await upstream.read(), status=upstream.status,
                            content_type="application/json")
    await response.prepare(request)  # type: ignore[arg-type]  # what prepare reads: above
    await response.write_eof()


async def main() -> None:
    client = UpstreamClient()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Front(loop, client), "127.0.0.1",
                                      int(sys.argv[1]))
    await server.serve_forever()


asyncio.run(main())
