"""Who may use /mcp: client keys with tool allow-lists and rate limits, and OAuth 2.1 tokens."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import jwt
import mcp_types as types
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography.hazmat.primitives.asymmetric import rsa
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from llm_operator.access.keyring import digest
from mcp import Client

from mcptools import Running, Start

ALL, GPT_ONLY, SLOW = "sk-llmop-all-tools", "sk-llmop-gpt-only", "sk-llmop-one-per-minute"
RESOURCE = "https://mcp.example.com/mcp"
ERAS = ["legacy", "auto"]  # 2025-11-25 handshake, 2026-07-28
HELLO = {"messages": [{"role": "user", "content": "Say hello"}]}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [
        {"id": "all", "sha256": digest(ALL)},
        {"id": "gpt-only", "sha256": digest(GPT_ONLY), "models": ["gpt-*"]},
        {"id": "slow", "sha256": digest(SLOW), "requestsPerMinute": 1},
    ]}))
    return path


@contextlib.asynccontextmanager
async def as_client(running: Running, token: str, era: str = "auto") -> AsyncIterator[Client]:
    """The SDK's client sending ``token`` (the caller owns the HTTP client it passes)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http, \
            Client(streamable_http_client(running.mcp, http_client=http), mode=era) as client:
        yield client


async def tool_names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def post(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], Any]:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers={
            "Accept": "application/json, text/event-stream", **headers}) as r:
        return r.status, dict(r.headers), await r.json(content_type=None)


@pytest.mark.parametrize(("headers", "error"), [
    ({}, "invalid_request"),
    ({"Authorization": "Basic YTpi"}, "invalid_request"),
    ({"Authorization": "Bearer sk-llmop-unknown"}, "invalid_token"),
    ({"Authorization": f"Bearer {digest(ALL)}"}, "invalid_token"),
])
async def test_mcp_needs_a_valid_bearer_token(start: Start, keys_file: Path,
                                              headers: dict[str, str], error: str) -> None:
    async with start(client_keys_file=keys_file) as running:
        status, got, body = await post(running.mcp, headers)
        assert status == 401 and body["error"] == error
        assert got["WWW-Authenticate"].startswith(f'Bearer error="{error}"')
        assert "resource_metadata" not in got["WWW-Authenticate"]  # no issuer configured
        metrics = running.service.metrics.registry
        assert metrics.get_sample_value("llmop_mcp_auth_failures_total",
                                        {"reason": error}) == 1


@pytest.mark.parametrize("era", ERAS)
async def test_a_key_lists_and_calls_only_its_tools(start: Start, keys_file: Path,
                                                    era: str) -> None:
    async with start(client_keys_file=keys_file) as running:
        async with as_client(running, ALL, era) as client:
            everything = await tool_names(client)
        async with as_client(running, GPT_ONLY, era) as client:
            names = await tool_names(client)
            assert names[0] == "list_available_models"
            gpt = [n for n in everything if "gpt" in n]
            assert names[1:] == gpt and len(everything) > len(names) > 1
            listed = await client.call_tool("list_available_models", {})
            models = (listed.structured_content or {})["models"]
            assert [m["toolName"] for m in models] == gpt
            other = next(n for n in everything[1:] if n not in names)
            with pytest.raises(MCPError, match=f"key 'gpt-only' may not call tool {other}"):
                await client.call_tool(other, HELLO)
            result = await client.call_tool(gpt[0], HELLO)
            assert not result.is_error
        calls = running.service.metrics.registry.get_sample_value
        assert calls("llmop_mcp_key_tool_calls_total", {"key": "gpt-only", "outcome": "ok"}) == 1
        assert calls("llmop_mcp_key_tool_calls_total",
                     {"key": "gpt-only", "outcome": "forbidden"}) == 1


async def test_a_keys_calls_per_minute_are_limited(start: Start, keys_file: Path) -> None:
    async with start(client_keys_file=keys_file) as running, \
            as_client(running, SLOW) as client:
        tool = (await tool_names(client))[1]
        assert not (await client.call_tool(tool, HELLO)).is_error
        refused = await client.call_tool(tool, HELLO)
        assert refused.is_error
        text = refused.content[0]
        assert isinstance(text, types.TextContent)
        assert text.text == "rate limit of key 'slow' reached; retry after 60 s"
        assert len(running.upstream.requests) == 1


async def test_a_session_belongs_to_the_key_that_opened_it(start: Start,
                                                           keys_file: Path) -> None:
    async with start(client_keys_file=keys_file) as running, aiohttp.ClientSession() as http:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}
        accept = {"Accept": "application/json, text/event-stream"}
        async with http.post(running.mcp, json=init, headers={
                **accept, "Authorization": f"Bearer {ALL}"}) as r:
            assert r.status == 200
            session = r.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        async with http.post(running.mcp, json=listing, headers={
                **accept, "Authorization": f"Bearer {GPT_ONLY}", "mcp-session-id": session,
                "mcp-protocol-version": "2025-11-25"}) as r:
            assert r.status == 404  # as if the session did not exist


# --- OAuth 2.1 ---------------------------------------------------------------------------


class Issuer:
    """An authorization server's published metadata and keys, on loopback."""

    def __init__(self) -> None:
        self.url = ""
        self.keys: dict[str, rsa.RSAPrivateKey] = {}
        self.fetches = 0
        self.app = web.Application()
        self.app.router.add_get("/.well-known/oauth-authorization-server", self.metadata)
        self.app.router.add_get("/jwks", self.jwks)

    def add_key(self, kid: str) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    async def metadata(self, _: web.Request) -> web.Response:
        return web.json_response({"issuer": self.url, "jwks_uri": f"{self.url}/jwks",
                                  "token_endpoint": f"{self.url}/token"})

    async def jwks(self, _: web.Request) -> web.Response:
        self.fetches += 1
        keys = []
        for kid, key in self.keys.items():
            jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
            keys.append({**jwk, "kid": kid, "use": "sig", "alg": "RS256"})
        return web.json_response({"keys": keys})

    def token(self, kid: str = "k1", *, named: str | None = None, **claims: Any) -> str:
        """A token signed with key ``kid``, its header naming ``named`` (default: kid)."""
        now = int(time.time())
        body = {"iss": self.url, "aud": RESOURCE, "client_id": "agent-7", "sub": "alice",
                "iat": now, "exp": now + 300, "scope": "mcp", **claims}
        return jwt.encode({k: v for k, v in body.items() if v is not None}, self.keys[kid],
                          algorithm="RS256", headers={"kid": named or kid})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    found = Issuer()
    found.add_key("k1")
    server = TestServer(found.app, host="127.0.0.1")
    await server.start_server()
    found.url = str(server.make_url("")).rstrip("/")
    yield found
    await server.close()


@contextlib.asynccontextmanager
async def with_oauth(start: Start, issuer: Issuer, **more: Any) -> AsyncIterator[Running]:
    async with start(oauth_issuer=issuer.url, resource_url=RESOURCE, **more) as running:
        yield running


async def test_protected_resource_metadata_names_the_issuer(start: Start,
                                                            issuer: Issuer) -> None:
    async with with_oauth(start, issuer) as running, aiohttp.ClientSession() as http:
        async with http.get(f"{running.url}/.well-known/oauth-protected-resource/mcp") as r:
            assert r.status == 200
            meta = await r.json()
        assert meta["resource"] == RESOURCE
        assert meta["authorization_servers"] == [f"{issuer.url}/"]
        assert meta["bearer_methods_supported"] == ["header"]
        status, headers, _ = await post(running.mcp, {})
        assert status == 401
        assert headers["WWW-Authenticate"].endswith(
            'resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp"')


@pytest.mark.parametrize("era", ERAS)
async def test_an_issuers_token_opens_mcp(start: Start, issuer: Issuer, era: str) -> None:
    async with with_oauth(start, issuer) as running, \
            as_client(running, issuer.token(), era) as client:
        assert "list_available_models" in await tool_names(client)


@pytest.mark.parametrize(("claims", "kid"), [
    ({"aud": "https://other.example.com/mcp"}, "k1"),  # issued for another resource
    ({"exp": int(time.time()) - 3600}, "k1"),  # expired
    ({"iss": "https://evil.example.com"}, "k1"),
    ({"client_id": None, "azp": None, "sub": None}, "k1"),  # names nobody
    ({}, "forged"),  # signed by a key the issuer never published
])
async def test_bad_tokens_are_refused(start: Start, issuer: Issuer, claims: dict[str, Any],
                                      kid: str) -> None:
    if kid == "forged":
        issuer.add_key(kid)
        token = issuer.token(kid)
        del issuer.keys[kid]
    else:
        token = issuer.token(**claims)
    async with with_oauth(start, issuer) as running:
        status, headers, body = await post(running.mcp, {"Authorization": f"Bearer {token}"})
        assert status == 401 and body["error"] == "invalid_token"
        assert token not in json.dumps(body) + json.dumps(headers)


async def test_a_rotated_issuer_key_is_fetched_once(start: Start, issuer: Issuer) -> None:
    async with with_oauth(start, issuer) as running:
        auth = {"Authorization": f"Bearer {issuer.token()}"}
        assert (await post(running.mcp, auth))[0] == 200
        issuer.add_key("k2")
        running.service.auth.oauth._fetched_at = -1e9  # type: ignore[union-attr]
        assert (await post(running.mcp, {"Authorization":
                                         f"Bearer {issuer.token('k2')}"}))[0] == 200
        assert issuer.fetches == 2
        for _ in range(3):  # an unknown kid again, within a minute: no new fetch
            bogus = issuer.token("k2", named="zz")
            assert (await post(running.mcp, {"Authorization": f"Bearer {bogus}"}))[0] == 401
        assert issuer.fetches == 2


async def test_keys_and_oauth_together(start: Start, issuer: Issuer, keys_file: Path) -> None:
    async with with_oauth(start, issuer, client_keys_file=keys_file) as running:
        for token in (GPT_ONLY, issuer.token()):
            assert (await post(running.mcp, {"Authorization": f"Bearer {token}"}))[0] == 200
