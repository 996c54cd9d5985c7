"""Admin registrations in a ConfigMap, on a real API server: every replica serves them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from llm_operator.kube import Connection
from llm_operator.mcp_server.admin_store import admin_records
from llm_operator.mcp_server.app import McpService
from llm_operator.mcp_server.run import service
from llm_operator.mcp_server.settings import McpSettings

from controlplane import ControlPlane
from mcptools import serving
from samples import REPO

STORE = ("ai-models", "mcp-admin-tools")  # config/mcp's names: its Role allows exactly these
TOOL = {"name": "ext_summarizer", "description": "Summarizes text.", "modelId": "ext-sum",
        "endpoint": "http://ext-llm.ai-models.svc:8000/v1", "domains": ["general"]}


def test_stored_payloads_become_tools_and_broken_ones_are_reported() -> None:
    records, problems = admin_records({
        "ext_summarizer": '{"name": "ext_summarizer", "endpoint": "http://ext.svc:8000/v1", '
                          '"modelId": "m", "domains": []}',
        "broken": "{not json", "wrong": '{"name": "other"}'})
    assert [r.tool_name for r in records] == ["ext_summarizer"]
    assert [p.split(":")[0] for p in problems] == ["broken", "wrong"]


def mcp_identity(apiserver: ControlPlane) -> Connection:
    """The MCP server's ServiceAccount with config/mcp's RBAC (least privilege)."""
    apiserver.kubectl("create", "namespace", "ai-models", check=False)
    apiserver.kubectl("apply", "-f", str(REPO / "config/mcp/rbac.yaml"))
    apiserver.kubectl("delete", "configmap", STORE[1], "-n", STORE[0], "--ignore-not-found")
    return apiserver.identity("mcp-server", "ai-models")


@contextlib.asynccontextmanager
async def replica(conn: Connection, token: Path) -> AsyncIterator[tuple[McpService, str]]:
    settings = McpSettings(admin_token_file=token)
    async with service(settings, kube=conn, namespaces=["ai-models"],
                       admin_configmap=STORE) as svc, serving(svc) as url:
        yield svc, url


def tools(svc: McpService) -> set[str]:
    return {r.tool_name for r in svc.catalog.records("admin")}


async def admin(http: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> int:
    async with http.request(method, f"{url}/admin/tools/{TOOL['name']}", json=body,
                            headers={"Authorization": "Bearer s3cret"}) as resp:
        return resp.status


async def test_a_registration_reaches_every_replica_and_survives_restarts(
        apiserver: ControlPlane, tmp_path: Path) -> None:
    conn = mcp_identity(apiserver)
    token = tmp_path / "token"
    token.write_text("s3cret")
    async with aiohttp.ClientSession() as http:
        async with replica(conn, token) as (_, url_a), replica(conn, token) as (b, _):
            assert await admin(http, "PUT", url_a, TOOL) == 200
            started = time.monotonic()
            await b.until(lambda: TOOL["name"] in tools(b), timeout=10)
            agreed = time.monotonic() - started
        async with replica(conn, token) as (c, url_c):  # a new replica, after a restart
            assert tools(c) == {TOOL["name"]}
            async with replica(conn, token) as (d, _):
                assert await admin(http, "DELETE", url_c, None) == 200
                await d.until(lambda: not tools(d), timeout=10)
    assert agreed < 5, f"replica B served the tool {agreed:.2f}s after A registered it"
    data = apiserver.kubectl("get", "configmap", STORE[1], "-n", STORE[0], "-o",
                             "jsonpath={.data}").stdout
    assert data in ("", "{}")  # the DELETE removed its key
