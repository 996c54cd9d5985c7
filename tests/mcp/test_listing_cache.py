"""tools/list answers replayed from memory: the SDK's own bytes, each request's own id."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from mcptools import Running

MODERN = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
ACCEPT = {"Accept": "application/json, text/event-stream"}
PATHS = {  # name: (headers, params)
    "plain JSON-RPC": ({}, {}),
    "2026-07-28": (MODERN, {"_meta": META}),
}


async def listing(running: Running, headers: dict[str, str], params: dict[str, Any],
                  request_id: int | str) -> tuple[int, bytes]:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": params}
    async with aiohttp.ClientSession() as http, http.post(
            running.mcp, json=body, headers={**ACCEPT, **headers}) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("path", PATHS)
async def test_a_replayed_listing_is_the_sdks_answer_with_the_new_id(running: Running,
                                                                     path: str) -> None:
    headers, params = PATHS[path]
    first = await listing(running, headers, params, 1)
    again = await listing(running, headers, params, "req-2")
    assert running.service.listings.hits == 1
    assert first[0] == again[0] == 200
    assert again[1] == first[1].replace(b'"id":1,', b'"id":"req-2",', 1)


async def test_eras_and_params_are_kept_apart(running: Running) -> None:
    plain = (await listing(running, {}, {}, 1))[1]
    modern = (await listing(running, MODERN, {"_meta": META}, 1))[1]
    assert plain != modern and b"resultType" in modern and b"resultType" not in plain
    assert running.service.listings.hits == 0


async def test_a_catalog_change_is_listed_at_once(running: Running) -> None:
    before = (await listing(running, MODERN, {"_meta": META}, 1))[1]
    doomed = next(p for p in running.models.iterdir() if "gpt" in p.name)
    version = running.service.catalog.version
    doomed.unlink()
    await running.service.until(lambda: running.service.catalog.version != version)
    after = (await listing(running, MODERN, {"_meta": META}, 1))[1]
    assert after.count(b'"inputSchema"') == before.count(b'"inputSchema"') - 1


async def test_errors_are_never_replayed(running: Running) -> None:
    for _ in range(2):
        status, body = await listing(running, MODERN, {"_meta": META, "cursor": "bogus"}, 1)
        assert b"invalid cursor" in body and status in {200, 400}
    assert running.service.listings.hits == 0
