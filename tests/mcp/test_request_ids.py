"""Request ids: every /mcp answer names one, and the server's log lines for it carry the same."""

from __future__ import annotations

import logging

import aiohttp
import httpx2
import pytest
from mcp.client.streamable_http import streamable_http_client

from llm_operator.mcp_server.requestids import RequestIdFilter
from mcp import Client

from fake_upstream import Reply
from mcptools import Running

HELLO = {"messages": [{"role": "user", "content": "Say hello"}]}
FAILED = "answered HTTP 500"


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="llm_operator")
    caplog.handler.addFilter(RequestIdFilter())  # as `llmop mcp` sets up its handlers
    return caplog


def ids_of(logs: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [getattr(r, "request_id", "?") for r in logs.records if text in r.getMessage()]


@pytest.mark.parametrize("era", ["legacy", "auto"])
async def test_a_failed_call_is_logged_under_the_id_its_answer_names(
        running: Running, logs: pytest.LogCaptureFixture, era: str) -> None:
    seen: list[str] = []

    async def note(response: httpx2.Response) -> None:
        seen.append(response.headers.get("x-request-id", ""))

    async with httpx2.AsyncClient(event_hooks={"response": [note]}) as http, \
            Client(streamable_http_client(running.mcp, http_client=http), mode=era) as client:
        tool = (await client.list_tools()).tools[1].name
        running.upstream.then(Reply(status=500, body={"error": "boom"}))
        seen.clear()
        result = await client.call_tool(tool, HELLO)
    assert result.is_error
    assert seen and all(len(s) == 16 for s in seen)
    assert set(ids_of(logs, FAILED)) == {seen[0]}  # the detail and the summary


@pytest.mark.parametrize(("given", "kept"), [
    ("trace-4bf92f3577b34da6", True),
    ("a" * 65, False),  # too long
    ("evil\tinjected log text", False),
])
async def test_a_clients_request_id_is_kept_when_safe(running: Running,
                                                      logs: pytest.LogCaptureFixture,
                                                      given: str, kept: bool) -> None:
    running.upstream.then(Reply(status=500, body={"error": "boom"}))
    async with aiohttp.ClientSession() as http:
        listing = await http.post(running.mcp, json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        tool = (await listing.json())["result"]["tools"][1]["name"]
        async with http.post(running.mcp, headers={"X-Request-Id": given}, json={
                "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": tool, "arguments": HELLO}}) as r:
            answered = r.headers["X-Request-Id"]
    assert (answered == given) is kept
    assert set(ids_of(logs, FAILED)) == {answered}


async def test_log_lines_outside_requests_say_so(running: Running,
                                                 logs: pytest.LogCaptureFixture) -> None:
    logging.getLogger("llm_operator.mcp_server").info("between requests")
    assert ids_of(logs, "between requests") == ["-"]
