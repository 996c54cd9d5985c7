"""The gateway's own server on raw sockets: what an HTTP/1.1 client sends, answered as aiohttp."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httptools
import pytest
from aiohttp import web

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.server import http as server
from llm_operator.gateway.server.http import GatewaySite
from llm_operator.gateway.settings.config import parse_config

from fake_upstream import FakeUpstream, Reply, completion
from gwtools import GatewayFactory

Upstream = tuple[FakeUpstream, str]
CHAT = json.dumps({"model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]}
                  ).encode()
WAIT = 10.0  # seconds a test waits for an answer it expects


def post(path: str = "/v1/chat/completions", body: bytes = CHAT, *, headers: str = "",
         version: str = "1.1") -> bytes:
    return (f"POST {path} HTTP/{version}\r\nHost: gw\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{headers}\r\n").encode() + body


def chunked(path: str, body: bytes) -> bytes:
    half = len(body) // 2
    return (f"POST {path} HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n"
            f"Content-Type: application/json\r\n\r\n{half:x}\r\n").encode() + body[:half] + \
        f"\r\n{len(body) - half:x}\r\n".encode() + body[half:] + b"\r\n0\r\n\r\n"


GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n"


class Answers:
    """The answers read off one connection, parsed with llhttp as a client would."""

    def __init__(self) -> None:
        self.done: list[dict[str, Any]] = []
        self._parser = httptools.HttpResponseParser(self)
        self._headers: dict[str, str] = {}
        self._body = b""
        self.closed = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers[name.decode().lower()] = value.decode()

    def on_body(self, body: bytes) -> None:
        self._body += body

    def on_message_complete(self) -> None:
        self.done.append({"status": self._parser.get_status_code(), "headers": self._headers,
                          "body": self._body,
                          "version": self._parser.get_http_version()})
        self._headers, self._body = {}, b""

    async def read(self, reader: asyncio.StreamReader, count: int) -> list[dict[str, Any]]:
        """Until ``count`` answers came, or the connection closed."""
        async with asyncio.timeout(WAIT):
            while len(self.done) < count:
                data = await reader.read(65536)
                if not data:
                    self.closed = True
                    break
                self._parser.feed_data(data)
        return self.done


async def exchange(port: int, data: bytes, count: int) -> tuple[list[dict[str, Any]], bool]:
    """``data`` sent at once on a new connection; the answers, and whether it was closed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    answers = Answers()
    done = await answers.read(reader, count)
    closed = answers.closed
    if not closed:  # is the connection still open? (nothing more comes, or EOF)
        try:
            async with asyncio.timeout(0.2):
                closed = await reader.read(1) == b""
        except TimeoutError:
            closed = False
    writer.close()
    return done, closed


def model_of(answer: dict[str, Any]) -> str:
    return str(json.loads(answer["body"])["model"])


@pytest.mark.parametrize(("case", "sent", "statuses", "closed"), [
    ("one proxied POST", post(), [200], False),
    ("two proxied POSTs pipelined in one write", post() + post(), [200, 200], False),
    ("a proxied POST, then another endpoint, pipelined", post() + GET_HEALTH, [200, 200],
     False),
    ("another endpoint first, then a proxied POST, on one connection", GET_HEALTH + post(),
     [200, 200], False),
    ("a chunked proxied POST", chunked("/v1/chat/completions", CHAT), [200], False),
    ("a chunked POST to an unknown path: aiohttp's 404, the body given again, chunked",
     chunked("/v1/nothing", CHAT) + post(), [404, 200], False),
    ("a body over the limit, by its Content-Length", post(body=b"x" * 2048), [413], False),
    ("a body over the limit, chunked", chunked("/v1/chat/completions", b"x" * 4096), [413],
     False),
    ("Connection: close", post(headers="Connection: close\r\n"), [200], True),
    ("HTTP/1.0, which closes by default", post(version="1.0"), [200], True),
    ("bytes that are not HTTP", b"\x16\x03\x01 nonsense\r\n\r\n", [400], True),
])
async def test_what_a_client_sends_is_answered_in_order(
        gateway: GatewayFactory, case: str, sent: bytes, statuses: list[int],
        closed: bool) -> None:
    client, _ = await gateway(config={"maxRequestBytes": 1024})
    answers, was_closed = await exchange(client.port, sent, len(statuses))
    assert [a["status"] for a in answers] == statuses, case
    assert was_closed == closed, case
    for answer in answers:
        if answer["status"] >= 400:  # every refusal in OpenAI's shape, saying what to fix
            assert json.loads(answer["body"])["error"]["message"], case
    if statuses[0] == 200 and "POST" in sent[:4].decode(errors="replace"):
        assert model_of(answers[0]) == "gpt-5.5-2026-04-23"  # the route's upstream answered


async def test_the_answers_head_is_aiohttps(gateway: GatewayFactory) -> None:
    """The same head as aiohttp's server writes: what proxies and clients see."""
    client, _ = await gateway()
    (answer,), _ = await exchange(client.port, post(), 1)
    through_aiohttp = (await exchange(client.port, GET_HEALTH + post(), 2))[0][1]
    assert set(answer["headers"]) == set(through_aiohttp["headers"])
    for name in ("content-type", "content-length", "server", "x-llmop-attempts"):
        assert answer["headers"][name] == through_aiohttp["headers"][name], name
    assert answer["version"] == through_aiohttp["version"] == "1.1"


async def test_expect_100_continue_is_answered_before_the_body(gateway: GatewayFactory) -> None:
    client, _ = await gateway()
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    head, body = post(headers="Expect: 100-continue\r\n").split(b"\r\n\r\n", 1)
    writer.write(head + b"\r\n\r\n")
    async with asyncio.timeout(WAIT):
        assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(body)
    answers = await Answers().read(reader, 1)
    assert answers[0]["status"] == 200
    writer.close()


async def held(fake: FakeUpstream, port: int
               ) -> tuple[asyncio.Event, asyncio.StreamReader, asyncio.StreamWriter]:
    """A request sent to the gateway at ``port`` and held by the upstream until set."""
    hold = asyncio.Event()
    fake.then(Reply(body=completion("gpt-5.5"), hold=hold))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(post())
    await asyncio.wait_for(fake.received.wait(), WAIT)  # the upstream has it
    return hold, reader, writer


async def test_a_client_that_goes_away_cancels_its_request(gateway: GatewayFactory,
                                                           upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway()
    hold, _, writer = await held(fake, client.port)
    writer.close()
    await asyncio.wait_for(fake.cancelled.wait(), WAIT)  # the gateway gave it up
    assert not any(load.in_flight for load in gw.table.loads.values())
    hold.set()


@pytest.mark.parametrize(("case", "sent", "answered"), [
    ("idle after an answer", post(), 1),
    ("nothing sent at all", b"", 0),
    ("a request line never finished (as aiohttp, against slow clients)",
     b"POST /v1/chat/compl", 0),
    ("headers never finished", b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nCont", 0),
    # a body still coming gets one keepalive more, then a 408 (it was held open forever)
    ("a body that never completes", b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
     b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"model\"", 1),
    ("a chunked body that never ends", b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"mod\r\n", 1),
])
async def test_an_idle_connection_is_closed_after_the_keepalive(
        gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch, case: str, sent: bytes,
        answered: int) -> None:
    monkeypatch.setattr(server, "KEEPALIVE_SECONDS", 0.05)
    client, _ = await gateway()
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(sent)
    answers = Answers()
    assert len(await answers.read(reader, answered)) == answered, case
    assert all(a["status"] in (200, 408) for a in answers.done), answers.done
    async with asyncio.timeout(WAIT):  # closed by the gateway, not by this test
        assert await reader.read() == b"", case
    writer.close()


async def test_a_connection_in_use_past_the_keepalive_stays_open_until_idle_for_it(
        gateway: GatewayFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One idle timer a connection: it waits while requests come, then closes the idle one."""
    monkeypatch.setattr(server, "KEEPALIVE_SECONDS", 0.05)
    client, _ = await gateway()
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    loop, answers = asyncio.get_running_loop(), Answers()
    start, sent = loop.time(), 0
    while loop.time() - start < 5 * server.KEEPALIVE_SECONDS:  # requests for 5 keepalives
        writer.write(post())
        sent += 1
        await answers.read(reader, sent)
        assert not answers.closed, f"closed in use after {sent} requests"
    assert [a["status"] for a in answers.done] == [200] * sent
    async with asyncio.timeout(WAIT):  # then idle: closed by the gateway
        assert await reader.read() == b""
    writer.close()


async def test_shutdown_lets_the_request_in_flight_finish(upstream: Upstream,
                                                          key_file: Path) -> None:
    fake, base_url = upstream
    gw = Gateway(parse_config({"routes": [{"models": ["gpt-5.5"], "upstream": {
        "baseUrl": base_url, "apiKey": {"file": str(key_file)}}}]}))
    runner = web.AppRunner(gw.app(), handler_cancellation=True)
    await runner.setup()
    site = GatewaySite(runner, "127.0.0.1", 0)
    await site.start()
    port = site.port
    hold, reader, writer = await held(fake, port)
    cleanup = asyncio.create_task(runner.cleanup())
    async with asyncio.timeout(WAIT):  # stopping: no longer listening
        while runner.sites:
            await asyncio.sleep(0)  # the cleanup runs on this loop: yield to it
    with pytest.raises(ConnectionRefusedError):
        await asyncio.open_connection("127.0.0.1", port)
    hold.set()  # the request in flight is still answered
    answers = await Answers().read(reader, 1)
    assert [a["status"] for a in answers] == [200]
    async with asyncio.timeout(WAIT):
        await cleanup
    writer.close()


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/slow"],
                         ids=["proxied, the gateway's server", "another route, aiohttp's"])
async def test_served_ends_every_request_within_the_drain_deadline(
        upstream: Upstream, key_file: Path, path: str) -> None:
    """Whichever server holds the request, the stop takes ``drain_seconds`` at most.

    aiohttp's connections wait their timeout for a handler and as long again after
    cancelling it: a stop once took twice the drain for a request they served.
    """
    fake, base_url = upstream
    fake.then(Reply(body=completion("gpt-5.5"), hold=asyncio.Event()))
    arrived, never = asyncio.Event(), asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        arrived.set()
        await never.wait()
        return web.Response()

    gw = Gateway(parse_config({"routes": [{"models": ["gpt-5.5"], "upstream": {
        "baseUrl": base_url, "apiKey": {"file": str(key_file)}}}]}))
    app = gw.app(lambda router: router.add_get("/slow", slow))
    drain = 1.0
    loop = asyncio.get_running_loop()
    async with server.served(app, drain) as listen:
        site = await listen("127.0.0.1", 0)
        _, writer = await asyncio.open_connection("127.0.0.1", site.port)
        writer.write(post() if path != "/slow" else
                     b"GET /slow HTTP/1.1\r\nHost: gw\r\n\r\n")
        await asyncio.wait_for((fake.received if path != "/slow" else arrived).wait(), WAIT)
        stopping = loop.time()
    stopped = loop.time() - stopping
    writer.close()
    assert stopped < drain + 0.5, f"{path}: {stopped:.2f} s to stop with a {drain} s drain"
