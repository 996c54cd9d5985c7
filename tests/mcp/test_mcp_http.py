"""Plain HTTP at the MCP server: the guide's curl commands, DNS-rebinding checks, the admin API."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from mcp import Client

from mcptools import Running, Start
from samples import REPO

GUIDE = REPO.parent / "shared" / "seeds" / "llm-operator-guide.txt"
TOKEN = "s3cret-admin-token"


def guide_step7_commands() -> list[tuple[str, dict[str, str], str]]:
    """(url, headers, body) of every curl in the guide's chapter 12 STEP 7, as written."""
    text = GUIDE.read_text(encoding="utf-8")
    step = text[text.index("STEP 7: Test the MCP server."):text.index("STEP 8")]
    commands = []
    for match in re.finditer(r"curl -X POST (\S+) \\\n-H \"([^\"]+)\" \\\n-d '(.*?)'", step,
                             re.S):
        name, _, value = match.group(2).partition(": ")
        commands.append((match.group(1), {name: value}, match.group(3)))
    return commands


def test_the_guide_has_four_step7_commands() -> None:
    assert [json.loads(body)["method"] for *_, body in guide_step7_commands()] == \
        ["tools/list", "tools/call", "tools/call", "tools/call"]


async def test_the_guides_curl_commands_work_verbatim(running: Running) -> None:
    answers = []
    async with aiohttp.ClientSession() as http:
        for guide_url, headers, body in guide_step7_commands():
            # curl sends Accept: */* and nothing else of note; only the port differs.
            url = guide_url.replace("http://localhost:3000", running.url)
            async with http.post(url, data=body.encode(), headers={
                    **headers, "Accept": "*/*"}) as r:
                assert r.status == 200, await r.text()
                assert r.content_type == "application/json"
                answers.append(await r.json())
    listed, catalog, qwen, gpt = answers
    assert listed["result"]["tools"][0]["name"] == "list_available_models"
    assert catalog["result"]["structuredContent"]["count"] == 7
    assert qwen["id"] == 3 and qwen["result"]["isError"] is False
    assert gpt["result"]["content"][0]["text"] == "Hello!"
    thinking = running.upstream.requests[0]["body"]
    assert thinking["model"] == "Qwen/Qwen3.6-35B-A3B"
    assert thinking["chat_template_kwargs"] == {"enable_thinking": True}
    assert running.upstream.requests[1]["body"]["model"] == "gpt-5.5"


@pytest.mark.parametrize(("headers", "status"), [
    ({"Host": "evil.example.com"}, 421),
    ({"Origin": "http://evil.example.com"}, 403),
    ({"Host": "mcp-server.ai-models.svc:3000", "Origin": "http://mcp-server.ai-models.svc"},
     200),
    ({"Host": "mcp-server:3000"}, 200),
    ({"Host": "localhost:3000", "Origin": "http://localhost:5173"}, 200),
])
async def test_host_and_origin_are_checked(start: Start, headers: dict[str, str],
                                           status: int) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    hosts = ("mcp-server", "mcp-server.ai-models", "mcp-server.ai-models.svc")
    async with start(allowed_hosts=hosts) as running, aiohttp.ClientSession() as http, \
            http.post(running.mcp, json=body, headers=headers) as r:
        assert r.status == status


@pytest.mark.parametrize(("body", "code", "words"), [
    (b"{}", -32600, '"jsonrpc": "2.0"'),
    (b"[]", -32600, "batches are not supported"),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', -32600, "batches are not supported"),
    (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', -32600, "MCP forbids null"),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, "string or an integer"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', -32600, "method must be"),
    (b'{"jsonrpc": "2.0", "id": 1}', -32600, "neither a request"),
    (b"{not json", -32700, "Parse error"),
    (b"[" * 100_000, -32700, "Parse error"),
])
async def test_malformed_json_rpc_gets_a_short_invalid_request(
        running: Running, body: bytes, code: int, words: str) -> None:
    """The SDK answered -32602 naming pydantic internals and URLs, or a silent 202."""
    async with aiohttp.ClientSession() as http, http.post(
            running.mcp, data=body, headers={"Content-Type": "application/json",
                                             "Accept": "application/json, text/event-stream"}
    ) as r:
        answer = await r.json()
    assert r.status == 400
    assert answer["error"]["code"] == code and words in answer["error"]["message"]
    assert "pydantic" not in answer["error"]["message"] and "http" not in json.dumps(answer)


async def test_a_forged_host_is_refused_before_the_body_is_read(running: Running) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            running.mcp, data=io.BytesIO(b"x" * 5_000_000),
            headers={"Host": "evil.example.com", "Content-Type": "application/json"}) as r:
        assert r.status == 421


async def test_an_official_client_through_a_service_name_is_rejected_unless_allowed(
        running: Running) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            running.mcp, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Host": "mcp-server.ai-models.svc"}) as r:
        assert r.status == 421


ADMIN_PAYLOAD = {"name": "pushed_model", "description": "Pushed by a controller.",
                 "endpoint": "", "modelId": "org/pushed", "domains": ["code"]}


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "admin-token"
    path.write_text(TOKEN + "\n")
    return path


async def admin(running: Running, method: str, name: str = "", body: Any = None,
                token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    url = f"{running.url}/admin/tools" + (f"/{name}" if name else "")
    async with aiohttp.ClientSession() as http, http.request(
            method, url, json=body, headers=headers) as r:
        return r.status, await r.json()


@pytest.mark.parametrize(("token", "status"), [(None, 401), ("wrong", 401), ("", 401)])
async def test_admin_requires_the_token(start: Start, token_file: Path, token: str | None,
                                        status: int) -> None:
    async with start(admin_token_file=token_file) as running:
        for method, name in (("GET", ""), ("PUT", "x"), ("DELETE", "x")):
            code, body = await admin(running, method, name, {}, token=token)
            assert (code, "Bearer" in body["error"]) == (status, True)
            assert TOKEN not in json.dumps(body)


async def test_admin_is_off_without_a_token_file(running: Running) -> None:
    status, body = await admin(running, "GET")
    assert status == 404 and "--admin-token-file" in body["error"]


async def test_admin_push_registers_and_removes_a_tool(start: Start, token_file: Path,
                                                       upstream: Any) -> None:
    _, endpoint = upstream
    async with start(admin_token_file=token_file) as running:
        payload = {**ADMIN_PAYLOAD, "endpoint": endpoint}
        assert await admin(running, "PUT", "pushed_model", payload) == (
            200, {"status": "registered", "toolName": "pushed_model"})
        async with Client(running.mcp) as client:
            assert "pushed_model" in [t.name for t in (await client.list_tools()).tools]
            result = await client.call_tool("pushed_model", {
                "messages": [{"role": "user", "content": "hi"}]})
            assert not result.is_error
        status, listed = await admin(running, "GET")
        assert status == 200 and {"toolName": "pushed_model", "modelId": "org/pushed",
                                  "endpoint": endpoint, "phase": "Ready",
                                  "source": "admin"} in listed
        assert await admin(running, "DELETE", "pushed_model") == (
            200, {"status": "unregistered", "toolName": "pushed_model"})
        assert (await admin(running, "DELETE", "pushed_model"))[0] == 404


@pytest.mark.parametrize(("name", "body", "message"), [
    ("other", ADMIN_PAYLOAD, "must match name in body"),
    ("pushed_model", {**ADMIN_PAYLOAD, "endpoint": "ftp://x"}, "endpoint must be an http(s)"),
    ("pushed_model", {**ADMIN_PAYLOAD, "modelId": ""}, "modelId must be a non-empty string"),
    ("pushed_model", [1, 2], "body must be a JSON object"),
    ("pushed_model", {**ADMIN_PAYLOAD, "endpoint": "http://169.254.169.254/latest"},
     "link-local or a cloud metadata service"),
    ("pushed_model", {**ADMIN_PAYLOAD, "endpoint": "https://evil.example.com/v1"},
     "outside the cluster"),
])
async def test_admin_rejects_bad_payloads_with_what_to_fix(start: Start, token_file: Path,
                                                           name: str, body: Any,
                                                           message: str) -> None:
    async with start(admin_token_file=token_file) as running:
        status, answer = await admin(running, "PUT", name, body)
    assert status == 400 and message in answer["error"]


@pytest.mark.parametrize(("name", "owner"), [
    ("list_available_models", "the server's own tool"),
    ("qwen35_9b_cpu", "already served from files"),  # a model file has that tool
])
async def test_admin_refuses_names_it_could_not_serve(start: Start, token_file: Path,
                                                      name: str, owner: str) -> None:
    """It used to answer 200 "registered" for a tool nobody would ever see."""
    async with start(admin_token_file=token_file) as running:
        status, answer = await admin(running, "PUT", name, {
            **ADMIN_PAYLOAD, "name": name, "endpoint": "http://127.0.0.1:9/v1"})
        listed = [t["toolName"] for t in (await admin(running, "GET"))[1]]
    assert status == 409 and owner in answer["error"]
    assert listed.count(name) <= 1


async def test_admin_caps_bodies_and_checks_the_host(start: Start, token_file: Path) -> None:
    async with start(admin_token_file=token_file) as running:
        big = {**ADMIN_PAYLOAD, "description": "x" * 100_000}
        assert (await admin(running, "PUT", "pushed_model", big))[0] == 413
        async with aiohttp.ClientSession() as http, http.get(
                f"{running.url}/admin/tools", headers={
                    "Authorization": f"Bearer {TOKEN}", "Host": "evil.example.com"}) as r:
            assert r.status == 421


async def test_the_token_file_is_reread_after_rotation(start: Start, token_file: Path) -> None:
    async with start(admin_token_file=token_file) as running:
        assert (await admin(running, "GET"))[0] == 200
        token_file.write_text("rotated")
        assert (await admin(running, "GET"))[0] == 401
        assert (await admin(running, "GET", token="rotated"))[0] == 200
