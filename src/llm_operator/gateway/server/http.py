"""The gateway's own server: the proxied POSTs served on httptools, the rest by aiohttp.

Serving a proxied request with aiohttp's server cost 14 % of its instructions (its request
object, router, payload stream and answer preparation; docs/benchmarks.md). The gateway's
server parses requests with httptools (llhttp, the parser aiohttp's own C parser wraps),
buffers a request's body up to the gateway's limit, runs the path's handler in a task of
its own, and writes a plain answer itself; a streamed answer goes through aiohttp's own
StreamResponse and writer. The first request for anything else (another path or method,
an upgrade) hands its connection to aiohttp's RequestHandler, which serves it and every
later request on that connection as if the gateway's server were not there: the bytes it has
parsed are given to aiohttp again (chunked bodies re-chunked), in order.

What aiohttp's server does for a request, the gateway's server does too: keep-alive with its
idle timeout, ``Expect: 100-continue``, pipelined requests answered in order, a client
that goes away cancelling its handler, and the runner's graceful shutdown (it is one of
the aiohttp Server's connections, so ``AppRunner.cleanup`` waits for its request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httptools
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol
from aiohttp.helpers import rfc822_formatted_time
from aiohttp.http import SERVER_SOFTWARE, HttpVersion, HttpVersion10, HttpVersion11
from aiohttp.http_writer import StreamWriter
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server
from multidict import CIMultiDict, CIMultiDictProxy

from llm_operator.gateway.errors import error_response, unexpected
from llm_operator.gateway.inbound.incoming import Handler

log = logging.getLogger("llm_operator.gateway")

KEEPALIVE_SECONDS = 75.0  # as aiohttp's server: an idle connection is closed after it
QUEUED_BYTES = 1 << 20  # pipelined bytes held while a request is answered: then paused
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True)
class ServedPaths:
    """What the gateway's server serves itself: POSTs to these paths, and its body limit."""

    handlers: Mapping[str, Handler]
    max_body: int


SERVED_PATHS = web.AppKey("served_paths", ServedPaths)  # on the app: what GatewaySite serves


class ServedRequest:
    """One request the gateway's server serves: what the parts and aiohttp's answers read of it."""

    __slots__ = ("_body", "_max_body", "_protocol", "_too_large", "_writer", "headers",
                 "keep_alive", "method", "path", "path_qs", "transport", "version")

    def __init__(self, method: str, path_qs: str, headers: CIMultiDictProxy[str], *,
                 version: HttpVersion, keep_alive: bool, body: bytes, too_large: bool,
                 max_body: int, protocol: Connection) -> None:
        self.method, self.path_qs, self.headers = method, path_qs, headers
        self.path = path_qs.partition("?")[0]
        self.version, self.keep_alive = version, keep_alive
        self._body, self._too_large, self._max_body = body, too_large, max_body
        self._protocol = protocol
        self.transport: asyncio.Transport | None = protocol.transport
        self._writer: StreamWriter | None = None

    @property
    def content_length(self) -> int | None:
        length = self.headers.get("Content-Length")
        return int(length) if length is not None and length.isdigit() else None

    @property
    def remote(self) -> str | None:
        if self.transport is None:
            return None
        peer = self.transport.get_extra_info("peername")
        return str(peer[0]) if isinstance(peer, (tuple, list)) and peer else None

    async def read(self) -> bytes:
        if self._too_large:  # as aiohttp's request.read() past client_max_size
            raise web.HTTPRequestEntityTooLarge(max_size=self._max_body,
                                                actual_size=self._max_body + 1)
        return self._body

    @property
    def answering(self) -> bool:
        """Whether bytes of an answer have gone out (as aiohttp's ``writer.output_size``)."""
        return self._writer is not None and self._writer.output_size > 0

    # --- what aiohttp's StreamResponse.prepare reads of a request ---------------------------

    @property
    def _payload_writer(self) -> StreamWriter:
        if self._writer is None:
            self._writer = StreamWriter(self._protocol, self._protocol.loop)
        return self._writer

    async def _prepare_hook(self, response: web.StreamResponse) -> None:
        """The on_response_prepare signal of aiohttp's app: the gateway's has none."""


class _Refused:
    """An answer the gateway's server writes itself (a request it could not parse), then closes."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data


Queued = tuple[ServedRequest, Handler] | bytes | _Refused  # to serve, for aiohttp, refused


class Connection(BaseProtocol):
    """One client connection: its requests parsed, served in order, or handed to aiohttp."""

    def __init__(self, loop: asyncio.AbstractEventLoop, routes: ServedPaths, server: Server
                 ) -> None:
        super().__init__(loop)
        self.loop, self.routes, self.server = loop, routes, server
        self._llhttp = httptools.HttpRequestParser(self)
        self._queue: deque[Queued] = deque()
        self._queued_bytes = 0
        self._task_handler: asyncio.Task[None] | None = None  # the request being answered
        self._aiohttp: RequestHandler | None = None  # the connection's, once handed over
        self._passing = False  # every request from here on goes to aiohttp
        self._in_message = False
        self._in_head = False  # a request line or headers not complete yet
        self._closing = False  # answer what is in flight, then close
        self._idle: asyncio.TimerHandle | None = None
        self._idle_from: float | None = None  # when it went idle; None: a request is served
        self._body_seen: float | None = None  # a body coming when the idle timer fired
        # the message being parsed
        self._url = b""
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._handler: Handler | None = None  # served here; None: passed to aiohttp
        self._chunked = False
        self._body: list[bytes] = []
        self._size = 0
        self._too_large = False

    # --- the transport's events -----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.server.connection_made(self, transport)  # type: ignore[arg-type]  # drained
        self._idle_timer()

    def data_received(self, data: bytes) -> None:
        try:
            self._llhttp.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:  # the rest is another protocol's
            self._passing = True
            self._put(data[upgrade.args[0]:])
        except httptools.HttpParserError as exc:
            self._in_message = False
            self._queue.append(_Refused(_bad_request(exc)))
            self.transport.pause_reading()  # type: ignore[union-attr]  # nothing more read
        self._pump()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_idle()
        if self._aiohttp is not None:
            self._aiohttp.connection_lost(exc)
        task = self._task_handler
        self.server.connection_lost(self, exc)  # type: ignore[arg-type]
        if task is not None:  # the client went away: its handler is cancelled
            task.cancel()
        self._queue.clear()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._aiohttp is not None:
            self._aiohttp.pause_writing()

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._aiohttp is not None:
            self._aiohttp.resume_writing()

    # --- what aiohttp's Server asks of its connections on shutdown ---------------------------

    def close(self) -> None:
        """Stop taking requests: close now when idle, else after the answer in flight."""
        self._closing = True
        if self._task_handler is None and self.transport is not None:
            self.transport.close()

    async def shutdown(self, timeout: float | None) -> None:
        """Let the request in flight finish within twice ``timeout``, then cancel it, close.

        Twice, as aiohttp's own connections take it: ``timeout`` for the handler to finish,
        then ``timeout`` more after it is cancelled (``served`` gives each half the drain).
        """
        self._closing = True
        task = self._task_handler
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task),
                                       None if timeout is None else 2 * timeout)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
        if self.transport is not None:
            self.transport.close()

    # --- httptools' callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._in_message = self._in_head = True
        self._body_seen = None
        self._url, self._raw_headers, self._body = b"", [], []
        self._size, self._too_large, self._chunked = 0, False, False

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._llhttp
        handler = None
        if not self._passing and parser.get_method() == b"POST" and not parser.should_upgrade():
            handler = self.routes.handlers.get(self._url.partition(b"?")[0].decode("latin-1"))
        self._handler = handler
        if handler is None:  # aiohttp's, from here on: its head again, as it came
            self._passing = True
            self._chunked = any(n.lower() == b"transfer-encoding" and b"chunked" in v.lower()
                                for n, v in self._raw_headers)
            self._put(b"".join([parser.get_method(), b" ", self._url, b" HTTP/",
                                parser.get_http_version().encode(), b"\r\n",
                                *(b"%s: %s\r\n" % pair for pair in self._raw_headers),
                                b"\r\n"]))
            return
        for name, value in self._raw_headers:
            if name.lower() == b"content-length" and value.isdigit() \
                    and int(value) > self.routes.max_body:
                self._too_large = True
            elif name.lower() == b"expect" and value.lower() == b"100-continue" \
                    and self._task_handler is None and not self._queue \
                    and self.transport is not None:
                self.transport.write(CONTINUE)

    def on_body(self, body: bytes) -> None:
        if self._handler is None:
            self._put(b"%x\r\n%s\r\n" % (len(body), body) if self._chunked else body)
            return
        self._size += len(body)
        if self._size > self.routes.max_body:
            self._too_large, self._body = True, []  # read() answers 413; nothing kept
        elif not self._too_large:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        if self._handler is None:
            if self._chunked:
                self._put(b"0\r\n\r\n")
            return
        parser = self._llhttp
        headers = CIMultiDictProxy(CIMultiDict(
            (n.decode("latin-1"), v.decode("utf-8", "surrogateescape"))
            for n, v in self._raw_headers))
        request = ServedRequest(
            "POST", self._url.decode("latin-1"), headers,
            version=HttpVersion11 if parser.get_http_version() == "1.1" else HttpVersion10,
            keep_alive=parser.should_keep_alive(), body=b"".join(self._body),
            too_large=self._too_large, max_body=self.routes.max_body, protocol=self)
        self._queue.append((request, self._handler))

    # --- serving the queue in order ---------------------------------------------------------

    def _put(self, data: bytes) -> None:
        if data:
            self._queue.append(data)
            self._queued_bytes += len(data)

    def _pump(self) -> None:
        """Serve what is queued, in order, while no answer is in flight."""
        queue = self._queue
        while queue and self._task_handler is None and self.transport is not None:
            item = queue.popleft()
            if isinstance(item, tuple):
                self._idle_from = None  # busy: the idle timer, when it fires, waits
                self._task_handler = self.loop.create_task(self._serve(*item))
            elif isinstance(item, bytes):
                self._queued_bytes -= len(item)
                self._to_aiohttp(item)
            else:
                self.transport.write(item.data)
                self.transport.close()
                return
        if self._aiohttp is not None and not queue and not self._in_message \
                and self.transport is not None:
            self.transport.set_protocol(self._aiohttp)  # its bytes go straight to it now
        elif self._queued_bytes > QUEUED_BYTES and self.transport is not None:
            self.transport.pause_reading()

    def _to_aiohttp(self, data: bytes) -> None:
        handler = self._aiohttp
        if handler is None:
            assert self.transport is not None
            self._cancel_idle()
            self.server.connection_lost(self, None)  # type: ignore[arg-type]  # aiohttp's now
            handler = self._aiohttp = self.server()
            handler.connection_made(self.transport)
            if self._paused:
                handler.pause_writing()
        handler.data_received(data)

    async def _serve(self, request: ServedRequest, handler: Handler) -> None:
        keep = False
        try:
            try:
                response = await handler(request)
            except Exception as exc:  # its own bugs: the proxied paths answer their errors
                if request.answering:
                    raise  # an answer under way cannot become an error: it is cut
                response = unexpected(request, exc)
            keep = await self._answer(request, response)
        except ConnectionError as exc:  # the client went away as it was written
            log.debug("client connection lost while answering: %s", exc)
        except Exception:  # an answer under way failed: the connection is cut
            log.exception("internal error answering %s", request.path)
        finally:
            self._task_handler = None
        transport = self.transport
        if transport is None:
            return
        if not keep or self._closing:
            transport.close()
            return
        if self._queued_bytes <= QUEUED_BYTES:
            transport.resume_reading()
        self._pump()
        if self._task_handler is None and not self._queue:
            self._idle_timer()

    async def _answer(self, request: ServedRequest, response: web.StreamResponse) -> bool:
        """Writes ``response``; whether the connection may take another request."""
        if type(response) is web.Response and not response.prepared \
                and isinstance(response.body, bytes) and not response.compression \
                and not response.chunked and not response.cookies and response.status >= 200 \
                and response.status not in (204, 304):
            return await self._write_plain(request, response)
        await response.prepare(request)  # type: ignore[arg-type]  # what prepare reads: above
        await response.write_eof()
        return bool(response.keep_alive)

    async def _write_plain(self, request: ServedRequest, response: web.Response) -> bool:
        """A plain answer in one write; whether the connection may take another request."""
        keep = request.keep_alive if response.keep_alive is None else response.keep_alive
        transport = self.transport
        if transport is None:
            raise ConnectionResetError("the client went away")
        transport.write(_plain(response, request.version, keep=keep))
        if self._paused:
            await self._drain_helper()
        return keep

    # --- idle connections -------------------------------------------------------------------

    def _idle_timer(self) -> None:
        """Idle from now: closed KEEPALIVE_SECONDS later unless a request comes first.

        One timer a connection, moved only when it fires: a request costs no timer of its
        own (asyncio's ``call_later`` and ``cancel`` were ~2 % of a proxied request).
        """
        self._idle_from = self.loop.time()
        if self._idle is None:
            self._idle = self.loop.call_at(self._idle_from + KEEPALIVE_SECONDS,
                                           self._idle_out)

    def _cancel_idle(self) -> None:
        self._idle_from = None
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _idle_out(self) -> None:
        """As aiohttp's: closed unless a request is answered.

        A body still coming gets one more keepalive to arrive whole, then a 408 (aiohttp
        waits for it forever: one client holding connections open with bodies it never
        finishes held the gateway's sockets).
        """
        armed_for = self._idle.when() if self._idle is not None else 0.0
        self._idle = None
        since = self._idle_from
        if since is None:  # a request is served: the timer starts again after its answer
            return
        if since + KEEPALIVE_SECONDS > armed_for:  # requests came and went since it was set
            self._idle = self.loop.call_at(since + KEEPALIVE_SECONDS, self._idle_out)
            return
        coming = self._in_message and not self._in_head
        if coming and self._body_seen is None:  # given one more keepalive to arrive whole
            self._body_seen = now = self.loop.time()
            self._idle = self.loop.call_at(now + KEEPALIVE_SECONDS, self._idle_out)
            return
        if self._task_handler is None and self.transport is not None \
                and self._aiohttp is None:
            if coming:  # a body still not whole: a client that never finishes holds nothing
                self.transport.write(_body_timed_out())
            self.transport.close()


def _plain(response: web.Response, version: HttpVersion, *, keep: bool) -> bytes:
    """A plain answer's bytes, its head as aiohttp's ``prepare`` would write it."""
    body = response.body
    assert isinstance(body, bytes)
    headers = response.headers
    head = [f"HTTP/{version[0]}.{version[1]} {response.status} {response.reason}\r\n"]
    for name, value in headers.items():
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} holds a newline")
        head.append(f"{name}: {value}\r\n")
    if "Content-Length" not in headers:
        head.append(f"Content-Length: {len(body)}\r\n")
    if body and "Content-Type" not in headers:
        head.append("Content-Type: application/octet-stream\r\n")
    if "Date" not in headers:
        head.append(f"Date: {rfc822_formatted_time()}\r\n")  # aiohttp's, once a second
    if "Server" not in headers:
        head.append(f"Server: {SERVER_SOFTWARE}\r\n")
    if "Connection" not in headers:
        if not keep and version == HttpVersion11:
            head.append("Connection: close\r\n")
        elif keep and version == HttpVersion10:
            head.append("Connection: keep-alive\r\n")
    head.append("\r\n")
    return "".join(head).encode("utf-8") + body


def _body_timed_out() -> bytes:
    """A 408 for a request whose body did not arrive whole in time, closing the connection."""
    return _plain(error_response(408, f"the request's body did not arrive whole within "
                                 f"{KEEPALIVE_SECONDS:g} s; send it at once",
                                 "invalid_request_error", "request_timeout"),
                  HttpVersion11, keep=False)


def _bad_request(exc: Exception) -> bytes:
    """A 400 for bytes that are not HTTP/1.1, in OpenAI's shape, closing the connection."""
    return _plain(error_response(400, f"malformed HTTP request: {exc}",
                                 "invalid_request_error", "bad_request"),
                  HttpVersion11, keep=False)


class GatewaySite(web.BaseSite):
    """aiohttp's TCPSite, serving an app with SERVED_PATHS set through this module's Connection.

    ``sock``: a bound socket to listen on instead of ``host`` and ``port`` (tests).
    """

    __slots__ = ("_host", "_port", "_sock")

    def __init__(self, runner: web.AppRunner, host: str | None = None, port: int = 8080, *,
                 sock: socket.socket | None = None, backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._host, self._port, self._sock = host, port, sock

    @property
    def name(self) -> str:
        return f"http://{self._host or '0.0.0.0'}:{self.port}"

    @property
    def port(self) -> int:
        if self._server is not None and self._server.sockets:  # type: ignore[attr-defined]
            return int(self._server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self._port

    async def start(self) -> None:
        await super().start()
        runner = self._runner
        assert isinstance(runner, web.AppRunner) and runner.server is not None
        server, loop = runner.server, asyncio.get_running_loop()
        routes = runner.app.get(SERVED_PATHS)
        factory: Any = server if routes is None else (lambda: Connection(loop, routes, server))
        if self._sock is not None:
            self._server = await loop.create_server(factory, sock=self._sock,
                                                    backlog=self._backlog)
        else:
            self._server = await loop.create_server(factory, self._host, self._port,
                                                    backlog=self._backlog,
                                                    reuse_address=True)


Listen = Callable[..., Awaitable[GatewaySite]]


@contextlib.asynccontextmanager
async def served(app: web.Application, drain_seconds: float) -> AsyncIterator[Listen]:
    """``app`` started (its startup hooks run) until the block ends, then drained and closed.

    The one way every gateway is served (``llmop gateway``, the router, ``llmop up``). The
    block gets ``listen(host, port)`` or ``listen(sock=...)``, which opens a site on this
    module's server once the caller is ready for requests (the router, once its table is
    built). On the way out the sites stop listening, the requests in flight get
    ``drain_seconds``, and the rest are cancelled, whatever they wait on.
    """
    # aiohttp's connections wait shutdown_timeout for a handler, then as long again after
    # cancelling it: half the drain each keeps every request within it
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None,
                           shutdown_timeout=drain_seconds / 2)
    await runner.setup()

    async def listen(host: str | None = None, port: int = 0, *,
                     sock: socket.socket | None = None) -> GatewaySite:
        site = GatewaySite(runner, host, port, sock=sock)
        await site.start()
        return site

    try:
        yield listen
    finally:
        await runner.cleanup()
