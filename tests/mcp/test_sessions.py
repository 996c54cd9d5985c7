"""Stateful sessions: one client cannot lock the others out (issue 14.1)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from mcp.client import Client

from llm_operator.mcp_server.sessions import SessionLedger

from mcptools import Start

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "flood", "version": "0"}}}
HEADERS = {"Accept": "application/json, text/event-stream"}


def test_the_ledger_counts_per_client_and_forgets_sessions_that_ended() -> None:
    ledger = SessionLedger(per_client=2)
    for sid in ("a", "b"):
        assert ledger.admit("10.0.0.1", live={"a", "b"})
        ledger.opened("10.0.0.1", sid)
    assert not ledger.admit("10.0.0.1", live={"a", "b"})
    assert ledger.admit("10.0.0.2", live={"a", "b"})  # another client
    assert ledger.admit("10.0.0.1", live={"b"})  # "a" expired or was deleted
    assert (ledger.holding("10.0.0.1"), len(ledger)) == (2, 1)  # b, and one being opened


def test_sessions_being_opened_count_so_a_burst_cannot_overshoot() -> None:
    ledger = SessionLedger(per_client=3)
    assert [ledger.admit("10.0.0.1", live=()) for _ in range(5)] == [True] * 3 + [False] * 2
    ledger.release("10.0.0.1")  # one failed before it had a session id
    assert ledger.admit("10.0.0.1", live=())


async def initialize(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.post(url, json=INIT, headers=HEADERS) as resp:
        body = await resp.json(content_type=None) if resp.status != 200 else {}
        return resp.status, {**body, "retry-after": resp.headers.get("Retry-After")}


async def test_a_flood_of_initializes_is_capped_per_client_and_others_still_get_in(
        start: Start) -> None:
    async with start(sessions_per_client=5) as running:
        flood = aiohttp.ClientSession(connector=aiohttp.TCPConnector(
            local_addr=("127.0.0.2", 0)))  # another loopback address: another client
        async with flood:
            answers = [await initialize(flood, running.mcp) for _ in range(8)]
        assert [status for status, _ in answers] == [200] * 5 + [429] * 3
        refused = answers[-1][1]
        assert refused["error"]["message"].startswith(
            "this client holds 5 MCP sessions already (the limit per client)")
        assert refused["retry-after"] == "300"
        async with Client(running.mcp, mode="legacy") as client:  # 127.0.0.1, not locked out
            assert (await client.list_tools()).tools


async def test_a_session_left_idle_frees_its_place(start: Start) -> None:
    async with start(sessions_per_client=1, session_idle_seconds=1) as running, \
            aiohttp.ClientSession() as http:
        assert (await initialize(http, running.mcp))[0] == 200
        assert (await initialize(http, running.mcp))[0] == 429
        async with asyncio.timeout(15):  # the SDK reaps idle sessions on its own clock
            while (await initialize(http, running.mcp))[0] != 200:
                await asyncio.sleep(0.2)
