"""The gateway's upstream HTTP/1.1 client against raw servers on loopback, byte for byte."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import trustme

from llm_operator.gateway.upstream.http1 import (
    BUFFER_HIGH,
    UpstreamClient,
    UpstreamError,
    UpstreamTimeout,
    target,
)

# an answer writes to the writer; one that never ends reads the reader until the client goes
Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@dataclass
class Server:
    """A loopback HTTP server that answers each request with ``answer`` and counts sockets."""

    answer: Answer
    url: str = ""
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    closed: asyncio.Event = field(default_factory=asyncio.Event)  # a client cut a socket
    received: asyncio.Event = field(default_factory=asyncio.Event)  # a request came in

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                self.received.set()
                await self.answer(reader, writer)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()


def fixed(body: bytes, *headers: str) -> Answer:
    """An answer with a Content-Length and ``headers``."""
    async def answer(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        lines = "".join(f"{h}\r\n" for h in headers)
        writer.write(f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{lines}\r\n".encode()
                     + body)
    return answer


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(answer: Answer, tls: ssl.SSLContext | None = None) -> Server:
        server = Server(answer)
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
        servers.append(listening)
        port = listening.sockets[0].getsockname()[1]
        server.url = f"{'https' if tls else 'http'}://localhost:{port}/v1/chat/completions"
        return server

    yield start
    for listening in servers:
        listening.close()


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    http = UpstreamClient()
    yield http
    await http.close()


async def post(http: UpstreamClient, server: Server, **timeouts: float) -> bytes:
    response = await http.post(server.url, b'{"model":"m"}', {"Content-Type": "application/json"},
                               connect_timeout=5, **timeouts)
    return await response.read()


@pytest.mark.parametrize(("url", "host", "port", "host_header", "path"), [
    ("http://vllm.team-a.svc:8000/v1/chat/completions", "vllm.team-a.svc", 8000,
     "vllm.team-a.svc:8000", "/v1/chat/completions"),
    ("https://api.openai.com/v1/chat/completions", "api.openai.com", 443, "api.openai.com",
     "/v1/chat/completions"),
    ("https://x.openai.azure.com/openai/v1/chat/completions?api-version=preview",
     "x.openai.azure.com", 443, "x.openai.azure.com",
     "/openai/v1/chat/completions?api-version=preview"),
    ("http://[::1]:9000/v1", "::1", 9000, "[::1]:9000", "/v1"),
    ("http://user:pw@host", "host", 80, "host", "/"),
])
def test_a_url_becomes_a_host_to_connect_to_and_a_request_path(
        url: str, host: str, port: int, host_header: str, path: str) -> None:
    where = target(url)
    assert (where.host, where.port, where.host_header, where.path) == (host, port,
                                                                       host_header, path)


@pytest.mark.parametrize("url", ["ftp://user:secret@host/x", "unix:///run/sock",
                                 "http:///nohost"])
def test_only_http_urls_are_targets(url: str) -> None:
    with pytest.raises(ValueError, match="not an http") as raised:
        target(url)
    assert "secret" not in str(raised.value)


async def test_a_body_is_read_whole_and_the_connection_kept_for_the_next_call(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    server = await serve(fixed(b'{"ok":true}', "Content-Type: application/json"))
    assert [await post(client, server) for _ in range(3)] == [b'{"ok":true}'] * 3
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:")
    assert b"\r\nContent-Type: application/json\r\n" in first
    assert first.endswith(b'\r\n\r\n{"model":"m"}')


class ForeignTransport:
    """A stream transport of another event loop (uvloop's): asyncio.Transport's methods,
    without subclassing it."""

    def __init__(self, inner: asyncio.BaseTransport) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


async def test_a_loop_whose_transports_are_not_asyncios_own_is_served(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient,
        monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.get_running_loop()
    connect = loop.create_connection

    async def foreign(factory: Callable[[], asyncio.Protocol], *args: Any, **kwargs: Any
                      ) -> Any:
        def wrapped() -> asyncio.Protocol:
            protocol = factory()
            made = protocol.connection_made
            protocol.connection_made = lambda t: made(ForeignTransport(t))  # type: ignore[method-assign,assignment,arg-type]
            return protocol
        return await connect(wrapped, *args, **kwargs)

    monkeypatch.setattr(loop, "create_connection", foreign)
    server = await serve(fixed(b'{"ok":true}', "Content-Type: application/json"))
    assert [await post(client, server) for _ in range(2)] == [b'{"ok":true}'] * 2


async def test_the_headers_come_back_case_insensitive(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    server = await serve(fixed(b"{}", "Retry-After: 7", "x-ratelimit-remaining-requests: 9",
                               "Set-Cookie: a=1", "Set-Cookie: b=2"))
    response = await client.post(server.url, b"{}", {}, connect_timeout=5)
    await response.read()
    assert response.status == 200
    assert response.headers["retry-after"] == "7"
    assert response.headers["X-RateLimit-Remaining-Requests"] == "9"
    assert response.headers.getall("set-cookie") == ["a=1", "b=2"]


async def test_a_chunked_stream_is_read_as_it_arrives(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    more = asyncio.Event()

    async def stream(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"9\r\ndata: a\n\n\r\n")
        await writer.drain()
        await more.wait()  # the client must see "a" before the server sends "b"
        writer.write(b"9\r\ndata: b\n\n\r\n0\r\n\r\n")

    server = await serve(stream)
    response = await client.post(server.url, b"{}", {}, connect_timeout=5, read_timeout=5)
    seen = []
    async for chunk in response.chunks():
        seen.append(chunk)
        more.set()
    response.release()
    assert seen == [b"data: a\n\n", b"data: b\n\n"]
    assert await post(client, server) == b"data: a\n\ndata: b\n\n"  # on the same connection
    assert server.connections == 1


@pytest.mark.parametrize(("headers", "body", "decoded"), [
    ("Content-Encoding: gzip", gzip.compress(b'{"a":1}'), b'{"a":1}'),
    ("Content-Encoding: identity", b'{"a":1}', b'{"a":1}'),
])
async def test_a_compressed_body_is_decoded(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient, headers: str, body: bytes,
        decoded: bytes) -> None:
    server = await serve(fixed(body, headers))
    assert await post(client, server) == decoded
    assert b"\r\nAccept-Encoding: gzip, deflate\r\n" in server.requests[0]


@pytest.mark.parametrize(("answer", "message"), [
    (fixed(b"x", "Content-Encoding: br"), "Content-Encoding 'br'"),
    (fixed(b"not gzip", "Content-Encoding: gzip"), "compressed body is corrupt"),
    (lambda _, w: _write(w, b"HTTP/1.1 abc\r\n\r\n"), "malformed HTTP response"),
    (lambda _, w: _write(w, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
                         close=True), "closed the connection before it answered"),
])
async def test_an_unusable_answer_is_an_upstream_error(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient, answer: Answer,
        message: str, caplog: pytest.LogCaptureFixture) -> None:
    server = await serve(answer)
    with pytest.raises(UpstreamError, match=message) as raised:
        await post(client, server)
    assert raised.value.reason == "connect"
    await asyncio.wait_for(server.closed.wait(), 5)  # the rest of the bytes were dropped ...
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []  # quietly


async def _write(writer: asyncio.StreamWriter, data: bytes, *, close: bool = False) -> None:
    writer.write(data)
    if close:
        writer.close()


async def test_an_interim_1xx_answer_is_skipped_for_the_real_one(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    server = await serve(lambda _, w: _write(
        w, b"HTTP/1.1 103 Early Hints\r\nLink: </x>; rel=preload\r\n\r\n"
           b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Real: 1\r\n\r\n{}"))
    response = await client.post(server.url, b"{}", {}, connect_timeout=5)
    assert (response.status, await response.read()) == (200, b"{}")
    assert "link" not in response.headers and response.headers["x-real"] == "1"
    assert await post(client, server) == b"{}"
    assert server.connections == 1


async def test_a_body_that_ends_with_its_connection_is_read_in_full(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    server = await serve(lambda _, w: _write(w, b"HTTP/1.1 200 OK\r\n\r\n{\"whole\":1}",
                                             close=True))
    assert await post(client, server) == b'{"whole":1}'
    assert await post(client, server) == b'{"whole":1}'
    assert server.connections == 2  # never reused


async def test_connection_close_and_idle_expiry_open_a_new_connection(
        serve: Callable[..., Awaitable[Server]]) -> None:
    closing = await serve(fixed(b"{}", "Connection: close"))
    keeping = await serve(fixed(b"{}"))
    expired = UpstreamClient(keepalive_seconds=0)
    try:
        for _ in range(2):
            await post(expired, closing)
            await post(expired, keeping)
    finally:
        await expired.close()
    assert (closing.connections, keeping.connections) == (2, 2)


async def test_a_connection_the_server_closed_while_idle_is_not_reused(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    async def once(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await fixed(b"{}")(_, writer)
        await writer.drain()
        writer.close()  # like uvicorn after its 5 s keep-alive

    server = await serve(once)
    await post(client, server)
    await asyncio.wait_for(server.closed.wait(), 5)
    await asyncio.wait_for(_until(lambda: not any(  # the client has seen the FIN
        c.open for idle in client._idle_connections.values() for c in idle)), 5)
    assert await post(client, server) == b"{}"
    assert server.connections == 2


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0)  # one loop turn: the transports' callbacks run


async def test_a_connection_refused_is_a_connect_error(client: UpstreamClient) -> None:
    with pytest.raises(UpstreamError, match=r"could not connect to 127\.0\.0\.1:9") as raised:
        await client.post("http://127.0.0.1:9/v1", b"{}", {}, connect_timeout=5)
    assert raised.value.reason == "connect"


async def test_no_answer_within_the_total_is_a_timeout_and_cuts_the_connection(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    server = await serve(lambda reader, _: reader.read())
    with pytest.raises(UpstreamTimeout) as raised:
        await post(client, server, total=0.05)
    assert raised.value.reason == "timeout"
    await asyncio.wait_for(server.closed.wait(), 5)


@pytest.mark.parametrize(("case", "first", "second", "answers_in", "times_out"), [
    ("a shorter total after a longer one", 60.0, 0.05, None, True),
    ("a longer total after a shorter one", 0.05, 60.0, 0.2, False),
])
async def test_each_request_on_a_reused_connection_keeps_its_own_total(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient, case: str, first: float,
        second: float, answers_in: float | None, times_out: bool) -> None:
    """The connection checks its answers' timeouts with one timer: each request's counts."""
    answered = 0

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal answered
        answered += 1
        if answered == 2:  # the second request: late (an upstream that takes its time), or never
            if answers_in is None:
                await reader.read()
                return
            await asyncio.sleep(answers_in)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    server = await serve(answer)
    assert await post(client, server, total=first) == b"ok"
    if times_out:
        with pytest.raises(UpstreamTimeout):
            await asyncio.wait_for(post(client, server, total=second), 10)
    else:
        assert await post(client, server, total=second) == b"ok", case
    assert server.connections == 1, case  # the same connection, reused


async def test_a_stream_times_out_on_silence_not_on_its_length(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    steady = asyncio.Event()

    async def slow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(6):  # 6 x 40 ms: longer than the 0.15 s read timeout in all
            await asyncio.sleep(0.04)
            writer.write(b"1\r\nx\r\n")
            await writer.drain()
        if steady.is_set():
            writer.write(b"0\r\n\r\n")
        else:
            await reader.read()  # then silence

    server = await serve(slow)
    response = await client.post(server.url, b"{}", {}, connect_timeout=5, read_timeout=0.15)
    with pytest.raises(UpstreamTimeout, match=r"sent nothing for 0\.15 s"):
        async for _ in response.chunks():
            pass
    steady.set()
    response = await client.post(server.url, b"{}", {}, connect_timeout=5, read_timeout=0.15)
    assert b"".join([c async for c in response.chunks()]) == b"x" * 6


@pytest.mark.parametrize("when", ["waiting for the headers", "reading the body"])
async def test_a_caller_that_gives_up_cuts_the_connection(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient, when: str) -> None:
    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if when == "reading the body":
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n")
        await reader.read()

    server = await serve(hang)
    if when == "reading the body":
        response = await client.post(server.url, b"{}", {}, connect_timeout=5)
        assert [c async for c in _first(response.chunks())] == [b"x"]
        response.close()
    else:
        call = asyncio.create_task(post(client, server))
        await asyncio.wait_for(server.received.wait(), 5)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
    await asyncio.wait_for(server.closed.wait(), 5)  # the upstream sees its client go


async def _first(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    async for chunk in chunks:
        yield chunk
        return


async def test_a_body_larger_than_the_read_buffer_arrives_whole(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    body = bytes(range(256)) * (3 * BUFFER_HIGH // 256)
    server = await serve(fixed(body))
    assert await post(client, server) == body


@pytest.mark.parametrize("header", [("X-Evil", "a\r\nHost: b"), ("X-Evil\r\n", "a"),
                                    ("Bad:Name", "a")])
async def test_a_header_that_would_split_the_request_is_refused_before_sending(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient,
        header: tuple[str, str]) -> None:
    server = await serve(fixed(b"{}"))
    with pytest.raises(ValueError, match="line break or colon"):
        await client.post(server.url, b"{}", dict([header]), connect_timeout=5)
    assert server.connections == 0


async def test_an_https_upstream_is_verified_against_the_trusted_ca(
        serve: Callable[..., Awaitable[Server]]) -> None:
    ca = trustme.CA()
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_tls)
    server = await serve(fixed(b'{"tls":true}'), server_tls)
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    http = UpstreamClient(ssl_context=trusting)
    untrusting = UpstreamClient()  # the system's CAs: trustme's is not among them
    try:
        assert await post(http, server) == b'{"tls":true}'
        with pytest.raises(UpstreamError, match="CERTIFICATE_VERIFY_FAILED"):
            await post(untrusting, server)
    finally:
        await http.close()
        await untrusting.close()


async def test_upstream_connections_probe_a_peer_that_vanished(
        serve: Callable[..., Awaitable[Server]], client: UpstreamClient) -> None:
    """TCP keepalive on every upstream socket: a deleted pod sends no reset, and a request
    waiting on it fails within ~30 s (15 s idle, then 3 probes 5 s apart), not at its
    deadline."""
    server = await serve(fixed(b"{}"))
    await post(client, server)
    (kept,) = [c for idle in client._idle_connections.values() for c in idle]
    assert kept.transport is not None
    sock = kept.transport.get_extra_info("socket")
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
    assert [sock.getsockopt(socket.IPPROTO_TCP, option) for option in (
        socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)] == [15, 5, 3]
