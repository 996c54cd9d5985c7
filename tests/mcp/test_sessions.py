"""Stateful sessions: one client cannot lock the others out (issue 14.1)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from mcp.client import Client
from prometheus_client.parser import text_string_to_metric_families

from llm_operator.mcp_server.sessions import Admission, SessionLedger

from mcptools import Running, Start

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "flood", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream"}


def test_the_ledger_counts_per_client_and_forgets_sessions_that_ended() -> None:
    ledger = SessionLedger(per_client=2)
    for sid in ("a", "b"):
        assert ledger.admit("10.0.0.1", live={"a", "b"}) == Admission(True)
        ledger.opened("10.0.0.1", sid)
    assert ledger.admit("10.0.0.2", live={"a", "b"}) == Admission(True)  # another client
    assert ledger.admit("10.0.0.1", live={"b"}) == Admission(True)  # "a" expired or deleted
    assert (ledger.holding("10.0.0.1"), len(ledger)) == (2, 1)  # b, and one being opened


def test_at_the_cap_the_least_recently_used_idle_session_ends_for_the_new_one() -> None:
    ledger = SessionLedger(per_client=3)
    live: set[str] = set()
    for sid in ("a", "b", "c"):
        ledger.admit("10.0.0.1", live)
        ledger.opened("10.0.0.1", sid)
        live.add(sid)
    ledger.begin("a")  # a request of a: busy, and now the most recently used
    ledger.end("a")
    ledger.begin("b")  # b holds a GET stream open: busy
    assert ledger.admit("10.0.0.1", live) == Admission(True, ends="c")
    ledger.opened("10.0.0.1", "d")
    live = {"a", "b", "d"}
    assert ledger.admit("10.0.0.1", live) == Admission(True, ends="a")  # b is still busy
    ledger.opened("10.0.0.1", "e")
    live = {"b", "d", "e"}
    ledger.begin("d")
    ledger.begin("e")
    assert ledger.admit("10.0.0.1", live) == Admission(False)  # every session busy
    ledger.end("b")  # its stream closed
    assert ledger.admit("10.0.0.1", live) == Admission(True, ends="b")
    assert ledger.holding("10.0.0.1") == 3


def test_sessions_being_opened_count_so_a_burst_cannot_overshoot() -> None:
    ledger = SessionLedger(per_client=3)
    assert [ledger.admit("10.0.0.1", live=()).admitted for _ in range(5)] == \
        [True] * 3 + [False] * 2
    ledger.release("10.0.0.1")  # one failed before it had a session id
    assert ledger.admit("10.0.0.1", live=()).admitted


async def initialize(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=INIT, headers=HEADERS) as resp:
        body = await resp.json(content_type=None) if resp.status != 200 else {}
        return resp.status, {**body, "retry-after": resp.headers.get("Retry-After"),
                             "session": resp.headers.get("mcp-session-id")}


def session_headers(sid: str) -> dict[str, str]:
    return {"mcp-session-id": sid, "mcp-protocol-version": "2025-11-25"}


async def ping(http: aiohttp.ClientSession, url: str, sid: str) -> int:
    """The status a request on session ``sid`` gets (404: the session is gone)."""
    async with http.post(url, json={"jsonrpc": "2.0", "id": 2, "method": "ping"},
                         headers={**HEADERS, **session_headers(sid)}) as resp:
        await resp.read()
        return resp.status


async def open_sessions(http: aiohttp.ClientSession, running: Running) -> float:
    """llmop_mcp_sessions: the SDK's open sessions, as the server's /metrics counts them."""
    async with http.get(f"{running.url}/metrics") as resp:
        return next(s.value for family in text_string_to_metric_families(await resp.text())
                    for s in family.samples if s.name == "llmop_mcp_sessions")


async def test_a_flood_of_initializes_keeps_one_client_at_its_cap_and_others_get_in(
        start: Start) -> None:
    async with start(sessions_per_client=5) as running:
        flood = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            local_addr=("127.0.0.2", 0)))  # another loopback address: another client
        async with flood:
            answers = [await initialize(flood, running.mcp) for _ in range(8)]
            ids = [opened["session"] for _, opened in answers]
            assert [status for status, _ in answers] == [200] * 8  # never locked out
            assert await open_sessions(flood, running) == 5
            # the three oldest ended for the newest: their ids answer 404, as the spec says
            # of a session the server ended (the client then initializes again)
            assert [await ping(flood, running.mcp, sid) for sid in ids] == \
                [404] * 3 + [200] * 5
        async with Client(running.mcp, mode="legacy") as client:  # 127.0.0.1, not locked out
            assert (await client.list_tools()).tools


async def test_a_client_whose_every_session_is_busy_is_refused_until_one_is_free(
        start: Start) -> None:
    async with start(sessions_per_client=2) as running, aiohttp.ClientSession() as http:
        ids = [(await initialize(http, running.mcp))[1]["session"] for _ in range(2)]
        streams = [await http.get(running.mcp, headers={**HEADERS, **session_headers(sid)})
                   for sid in ids]  # a GET stream open on each: both busy
        assert all(s.status == 200 for s in streams)
        status, refused = await initialize(http, running.mcp)
        assert status == 429
        assert refused["error"]["message"].startswith(
            "this client holds 2 MCP sessions already (the limit per client), each with a "
            "request in flight or a stream open")
        assert refused["retry-after"] == "300"
        streams[0].close()  # its stream ends: that session is idle again
        async with asyncio.timeout(10):
            while (await initialize(http, running.mcp))[0] != 200:
                await asyncio.sleep(0.05)
        assert await ping(http, running.mcp, ids[0]) == 404
        streams[1].close()


async def test_a_session_left_idle_ends_by_itself(start: Start) -> None:
    async with start(session_idle_seconds=1) as running, aiohttp.ClientSession() as http:
        status, opened = await initialize(http, running.mcp)
        assert status == 200
        async with asyncio.timeout(15):  # the SDK reaps idle sessions on its own clock
            while await open_sessions(http, running) != 0:
                await asyncio.sleep(0.2)
        assert await ping(http, running.mcp, opened["session"]) == 404
