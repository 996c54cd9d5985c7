"""Egress proxies: which upstream goes through which proxy, and calls through a real one."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config
from llm_operator.gateway.upstream.http1 import UpstreamClient, UpstreamError, target
from llm_operator.gateway.upstream.proxies import Proxy, ProxyError, ProxySettings, proxy_settings

CORP = {"HTTPS_PROXY": "http://egress.corp:3128", "HTTP_PROXY": "http://plain.corp:8080"}


@pytest.mark.parametrize(("env", "url", "via"), [
    ({}, "https://api.openai.com", None),
    (CORP, "https://api.openai.com", "egress.corp:3128"),
    (CORP, "http://vllm.team-a.svc:8000", "plain.corp:8080"),
    ({"HTTPS_PROXY": "http://egress.corp:3128"}, "http://vllm.team-a.svc:8000", None),
    ({"https_proxy": "http://lower:1", "HTTPS_PROXY": "http://upper:2"}, "https://a.b", "lower:1"),
    ({"ALL_PROXY": "socks5://vpn:1080"}, "https://a.b", None),  # read by curl, not here
    ({"HTTPS_PROXY": "egress.corp:3128"}, "https://a.b", "egress.corp:3128"),  # bare host:port
    ({"HTTPS_PROXY": "http://egress.corp"}, "https://a.b", "egress.corp:80"),
    # loopback never goes through a proxy (llmop up's local engines)
    (CORP, "http://127.0.0.1:8081", None),
    (CORP, "http://localhost:8081", None),
    (CORP, "http://[::1]:8081", None),
    # NO_PROXY: names match themselves and their subdomains; IPs, CIDRs, ports, *
    ({**CORP, "NO_PROXY": ".svc,.cluster.local"}, "http://vllm.team-a.svc:8000", None),
    ({**CORP, "NO_PROXY": "svc"}, "http://vllm.team-a.svc:8000", None),
    ({**CORP, "NO_PROXY": "*.openai.com"}, "https://api.openai.com", None),
    ({**CORP, "NO_PROXY": "openai.com"}, "https://notopenai.com", "egress.corp:3128"),
    ({**CORP, "NO_PROXY": "10.0.0.0/8"}, "http://10.1.2.3:8000", None),
    ({**CORP, "NO_PROXY": "10.0.0.0/8"}, "http://11.1.2.3:8000", "plain.corp:8080"),
    ({**CORP, "NO_PROXY": "10.1.2.3"}, "http://10.1.2.3:8000", None),
    ({**CORP, "NO_PROXY": "api.openai.com:443"}, "https://api.openai.com", None),
    ({**CORP, "NO_PROXY": "api.openai.com:8443"}, "https://api.openai.com", "egress.corp:3128"),
    ({**CORP, "NO_PROXY": "[fd00::1]:8000"}, "http://[fd00::1]:8000", None),
    ({**CORP, "NO_PROXY": "fd00::/8"}, "http://[fd00::1]:8000", None),
    ({**CORP, "no_proxy": " a.b , *"}, "https://api.openai.com", None),
])
def test_which_upstream_goes_through_which_proxy(env: dict[str, str], url: str,
                                                 via: str | None) -> None:
    where = target(url)
    proxy = proxy_settings(env).for_target(where.scheme, where.host, where.port)
    assert (proxy.label if proxy else None) == via


def test_proxy_credentials_become_basic_auth_and_stay_out_of_the_log_line() -> None:
    settings = proxy_settings({"HTTPS_PROXY": "http://svc%40corp:p%3Ass@egress.corp:3128",
                               "NO_PROXY": ".svc"})
    assert settings.https == Proxy("egress.corp", 3128, "Basic " + base64.b64encode(
        b"svc@corp:p:ss").decode())
    assert settings.describe() == ("https upstreams through egress.corp:3128; not for .svc "
                                   "(nor for loopback)")
    assert ProxySettings().describe() is None


@pytest.mark.parametrize(("env", "words"), [
    ({"HTTPS_PROXY": "https://egress.corp:3128"}, "HTTPS_PROXY: the gateway speaks to "
     "proxies over http:// only (scheme 'https')"),
    ({"https_proxy": "socks5://u:secret@egress.corp:1080"}, "https_proxy: the gateway speaks"),
    ({"HTTP_PROXY": "http://egress.corp:port"}, "HTTP_PROXY: the proxy's port is not a number"),
])
def test_an_unusable_proxy_variable_is_named_without_its_password(env: dict[str, str],
                                                                  words: str) -> None:
    with pytest.raises(ProxyError, match="^" + words.replace("(", r"\(").replace(")", r"\)")) \
            as raised:
        proxy_settings(env)
    assert "secret" not in str(raised.value)


@dataclass
class FakeProxy:
    """An HTTP proxy on loopback: tunnels CONNECT to ``tunnel_to``, answers plain requests."""

    tunnel_to: int = 0
    refuse: bytes | None = None  # the status line to refuse CONNECT with
    heads: list[bytes] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        if not head.startswith(b"CONNECT "):
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{\"proxied\":true}\n")
            await writer.drain()
            writer.close()
            return
        if self.refuse is not None:
            writer.write(self.refuse + b"\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.tunnel_to)
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except ConnectionError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@dataclass
class Upstream:
    """An HTTPS OpenAI-ish upstream whose certificate names api.upstream.test."""

    port: int
    ca: trustme.CA


@pytest.fixture
async def tls_upstream() -> AsyncIterator[Upstream]:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("api.upstream.test").configure_cert(context)

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"id": "c1", "object": "chat.completion",
                                  "model": body["model"], "choices": [{
                                      "index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": "hi"}}],
                                  "usage": {"prompt_tokens": 3, "completion_tokens": 1}})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    yield Upstream(port, ca)
    await runner.cleanup()


@pytest.fixture
async def start_proxy() -> AsyncIterator[Callable[..., Any]]:
    servers: list[asyncio.Server] = []

    async def start(proxy: FakeProxy) -> FakeProxy:
        server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        servers.append(server)
        proxy.port = server.sockets[0].getsockname()[1]
        return proxy

    yield start
    for server in servers:
        server.close()


async def test_an_https_upstream_is_reached_through_a_connect_tunnel(
        tls_upstream: Upstream, start_proxy: Callable[..., Any]) -> None:
    proxy: FakeProxy = await start_proxy(FakeProxy(tunnel_to=tls_upstream.port))
    trusting = ssl.create_default_context()
    tls_upstream.ca.configure_trust(trusting)
    settings = proxy_settings({"HTTPS_PROXY": f"http://gw:s3cret@127.0.0.1:{proxy.port}"})
    http = UpstreamClient(ssl_context=trusting, proxies=settings)
    try:
        for _ in range(2):  # the tunnel is kept like any connection
            response = await http.post(
                f"https://api.upstream.test:{tls_upstream.port}/v1/chat/completions",
                b'{"model":"m"}', {"Content-Type": "application/json"}, connect_timeout=5)
            assert response.status == 200
            assert b'"content": "hi"' in await response.read()
    finally:
        await http.close()
    assert len(proxy.heads) == 1
    authority = f"api.upstream.test:{tls_upstream.port}".encode()
    assert proxy.heads[0] == (b"CONNECT " + authority + b" HTTP/1.1\r\nHost: " + authority
                              + b"\r\nProxy-Authorization: Basic "
                              + base64.b64encode(b"gw:s3cret") + b"\r\n\r\n")


async def test_an_http_upstream_is_asked_for_through_the_proxy_by_its_whole_url(
        start_proxy: Callable[..., Any]) -> None:
    proxy: FakeProxy = await start_proxy(FakeProxy())
    http = UpstreamClient(proxies=proxy_settings({"HTTP_PROXY": f"http://127.0.0.1:{proxy.port}"}))
    try:
        response = await http.post("http://vllm.team-a.svc:8000/v1/chat/completions", b"{}",
                                   {}, connect_timeout=5)
        assert await response.read() == b'{"proxied":true}\n'
    finally:
        await http.close()
    assert proxy.heads[0].startswith(
        b"POST http://vllm.team-a.svc:8000/v1/chat/completions HTTP/1.1\r\n"
        b"Host: vllm.team-a.svc:8000\r\n")


async def test_a_proxy_that_refuses_the_tunnel_is_a_connect_error_naming_it(
        start_proxy: Callable[..., Any]) -> None:
    proxy: FakeProxy = await start_proxy(
        FakeProxy(refuse=b"HTTP/1.1 407 Proxy Authentication Required"))
    http = UpstreamClient(proxies=proxy_settings({"HTTPS_PROXY": f"http://u:pw@127.0.0.1:{proxy.port}"}))
    try:
        with pytest.raises(UpstreamError) as raised:
            await http.post("https://api.openai.com/v1/chat/completions", b"{}", {},
                            connect_timeout=5)
    finally:
        await http.close()
    assert str(raised.value) == (f"the proxy 127.0.0.1:{proxy.port} refused the tunnel to "
                                 "api.openai.com:443: 'HTTP/1.1 407 Proxy Authentication "
                                 "Required'")
    assert raised.value.reason == "connect"


async def test_the_gateway_reaches_an_https_provider_through_https_proxy(
        tls_upstream: Upstream, start_proxy: Callable[..., Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As in a locked-down cluster: HTTPS_PROXY on the pod, the egress CA in SSL_CERT_FILE."""
    proxy: FakeProxy = await start_proxy(FakeProxy(tunnel_to=tls_upstream.port))
    tls_upstream.ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", ".svc")
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider")
    gateway = Gateway(parse_config({"routes": [{"models": ["frontier"], "upstream": {
        "baseUrl": f"https://api.upstream.test:{tls_upstream.port}/v1",
        "model": "gpt-5.5", "apiKey": {"env": "PROVIDER_KEY"}}}]}))
    client: TestClient[Any, Any] = TestClient(TestServer(gateway.app(), host="127.0.0.1"))
    await client.start_server()
    try:
        resp = await client.post("/v1/chat/completions", json={
            "model": "frontier", "messages": [{"role": "user", "content": "hello"}]})
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["model"] == "gpt-5.5"
    finally:
        await client.close()
    assert proxy.heads[0].startswith(b"CONNECT api.upstream.test:")


async def test_a_guard_model_is_asked_through_the_egress_proxy_like_any_upstream(
        start_proxy: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge behind HTTP_PROXY: its call goes where every request to it would."""
    proxy: FakeProxy = await start_proxy(FakeProxy())
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    judge = {"name": "safety", "action": "block", "onError": "closed", "judge": {
        "model": "guard", "family": "llama-guard-3", "categories": ["S1"]}}
    gateway = Gateway(parse_config({"routes": [
        {"models": ["m"], "upstream": {"baseUrl": "http://vllm.team-a.svc:8000/v1",
                                       "auth": "none"}, "guardrails": {"input": [judge]}},
        {"models": ["guard"], "upstream": {"baseUrl": "http://guard.team-a.svc:8000/v1",
                                           "auth": "none"}}]}))
    client: TestClient[Any, Any] = TestClient(TestServer(gateway.app(), host="127.0.0.1"))
    await client.start_server()
    try:
        resp = await client.post("/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hello"}]})
        assert resp.status == 503  # the proxy's answer holds no verdict: failed closed
    finally:
        await client.close()
    assert proxy.heads[0].startswith(
        b"POST http://guard.team-a.svc:8000/v1/completions HTTP/1.1\r\n")
