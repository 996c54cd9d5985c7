"""Hostile traffic at the MCP endpoint: no 5xx, no hang, no traceback, no leak.

The server (client keys, one model guarded by a masking PII guard on its call and its
answer) describes its tools (``tools/list``); hypothesis draws each tool's arguments from
its input schema (valid ones, ones with a field missing or of the wrong type, arbitrary
JSON), and whole JSON-RPC messages (known methods and unknown ones, odd ids, batches,
params of any shape), sent with no key, a wrong key or the right one, and with the
protocol headers right, wrong or missing. Every answer comes within its time, is not a
server error, carries no traceback and no key, and nothing the server logs holds a key,
a card number or an e-mail address. Drawn with a fixed seed: the same cases every run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from hypothesis import strategies as st

from llm_operator.access.keyring import digest

from fuzzing import CARD, JSON, drawn, from_schema, mutated
from mcptools import Start, with_guardrails

KEY = "sk-llmop-mcp-fuzz-0123456789"
MAIL = "jane@example.com"
CASES_PER_TOOL = 24
MESSAGES = 120
ANSWER_SECONDS = 10.0
RAILS = {"input": [{"name": "no-pii", "action": "mask", "pii": {}}],
         "output": [{"name": "no-pii", "action": "mask", "pii": {}}]}
METHODS = ["initialize", "ping", "tools/list", "tools/call", "resources/list",
           "resources/read", "prompts/list", "prompts/get", "completion/complete",
           "logging/setLevel", "notifications/initialized", "notifications/cancelled",
           "server/discover", "tasks/get", "x/unknown", ""]
IDS = st.integers() | st.text(max_size=8) | st.none() | st.floats(allow_nan=False) \
    | st.lists(st.integers(), max_size=2)
RIGHT = {"Authorization": f"Bearer {KEY}"}
AUTH = st.sampled_from([RIGHT, RIGHT, RIGHT, {}, {"Authorization": "Bearer sk-wrong"},
                        {"Authorization": KEY}])
PROTOCOL = st.sampled_from([{}, {"MCP-Protocol-Version": "2026-07-28"},
                            {"MCP-Protocol-Version": "2025-11-25"},
                            {"MCP-Protocol-Version": "1999-01-01"},
                            {"MCP-Protocol-Version": "\u00e9t\u00e9"}])
ACCEPT = st.sampled_from(["application/json, text/event-stream", "*/*", "text/html", ""])


def request(method: st.SearchStrategy[str], params: st.SearchStrategy[Any]
            ) -> st.SearchStrategy[dict[str, Any]]:
    """A well-formed JSON-RPC request."""
    return st.fixed_dictionaries({"jsonrpc": st.just("2.0"), "id": st.integers(0, 99),
                                  "method": method, "params": params})


def odd(method: st.SearchStrategy[str], params: st.SearchStrategy[Any]
        ) -> st.SearchStrategy[Any]:
    """Something shaped almost like a JSON-RPC request: fields missing or odd (ids of every
    JSON type), a batch, or any JSON at all."""
    message = st.fixed_dictionaries(
        {"method": method}, optional={"jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
                                      "id": IDS, "params": params})
    return st.one_of(message, st.lists(message, min_size=1, max_size=3), JSON)


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [{"id": "fuzz", "sha256": digest(KEY)}]}))
    return path


async def _post(http: aiohttp.ClientSession, url: str, body: bytes,
                headers: dict[str, str]) -> tuple[int, str]:
    async with asyncio.timeout(ANSWER_SECONDS), http.post(url, data=body, headers={
            "Content-Type": "application/json", **headers}) as r:
        return r.status, await r.text()


async def test_the_mcp_endpoint_answers_hostile_messages_without_a_server_error(
        start: Start, keys_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    right = {"Authorization": f"Bearer {KEY}", "Accept": "application/json, text/event-stream"}
    async with start(client_keys_file=keys_file) as running, \
            aiohttp.ClientSession() as http:
        guarded = await with_guardrails(running, RAILS)
        status, text = await _post(http, running.mcp, json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(), right)
        assert status == 200, text
        tools = {t["name"]: t["inputSchema"] for t in json.loads(text)["result"]["tools"]}
        assert "gemma4_31b_nvidia" in tools and "list_available_models" in tools
        cases: list[tuple[str, Any, dict[str, str]]] = []
        for name, schema in tools.items():
            valid = from_schema(schema, [])
            call = st.just("tools/call")
            for arguments, count in ((valid, CASES_PER_TOOL // 2),
                                     (mutated(valid) | JSON, CASES_PER_TOOL // 4)):
                calls = request(call, st.fixed_dictionaries({"name": st.just(name),
                                                             "arguments": arguments}))
                cases += [(name, *case) for case in drawn(st.tuples(calls, AUTH), count)]
            calls = odd(call, st.fixed_dictionaries({"name": st.just(name),
                                                     "arguments": valid}))
            cases += [(name, *case) for case in drawn(st.tuples(calls, AUTH),
                                                      CASES_PER_TOOL // 4)]
        methods = st.sampled_from(METHODS) | st.text(max_size=12)
        headers = st.builds(lambda auth, proto, accept: {**auth, **proto, "Accept": accept},
                            AUTH, PROTOCOL, ACCEPT)
        for messages in (request(methods, JSON), odd(methods, JSON)):
            cases += [("message", *case) for case in drawn(st.tuples(messages, headers),
                                                           MESSAGES // 2)]
        statuses: dict[int, int] = {}
        for what, body, sent_headers in cases:
            status, text = await _post(http, running.mcp, json.dumps(body).encode(),
                                       {"Accept": right["Accept"], **sent_headers})
            assert status < 500, (what, body, sent_headers, status, text)
            assert "Traceback" not in text and KEY not in text, (what, body, text)
            statuses[status] = statuses.get(status, 0) + 1
        for raw in (b"", b"{", b"\xff\xfe", b"[" * 5000 + b"]" * 5000):
            status, text = await _post(http, running.mcp, raw, right)
            assert 400 <= status < 500, (raw[:20], status, text)
        asked = [r["body"] for r in running.upstream.requests]
    assert sum(body["model"] == guarded for body in asked) >= 5  # guarded calls were made
    to_guarded = [json.dumps(body) for body in asked if body["model"] == guarded]
    assert not [sent for sent in to_guarded if CARD in sent or MAIL in sent]
    assert any("<CREDIT_CARD>" in sent or "<EMAIL_ADDRESS>" in sent for sent in to_guarded)
    logged = caplog.text
    assert KEY not in logged and CARD not in logged and MAIL not in logged
    assert len(cases) == CASES_PER_TOOL * len(tools) + MESSAGES
    assert {200, 401} <= set(statuses), statuses  # it reached the tools and refused
