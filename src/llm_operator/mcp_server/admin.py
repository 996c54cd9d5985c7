"""The MCP server's admin API: tools registered and removed over HTTP with the admin token."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from llm_operator.kube import ApiError
from llm_operator.mcp_server.admin_store import ConfigMapStore
from llm_operator.mcp_server.envelope import read_body
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.registry.catalog import AdminPayloadError, Catalog, Source, ToolRecord, from_admin
from llm_operator.registry.tools import LIST_TOOL

log = logging.getLogger(__name__)
ADMIN_MAX_BODY = 64 * 1024  # one tool's registration


class Registry(Protocol):
    """Where the admin API's registrations are served from (the MCP service)."""

    catalog: Catalog

    async def publish(self, source: Source, records: list[ToolRecord]) -> None: ...


@dataclass
class AdminApi:
    """GET, PUT and DELETE /admin/tools: the operator's pushes, and hand registrations.

    With a ``store`` (a ConfigMap) every registration is written there first and other
    replicas follow it; without one it lives in this process only.
    """

    settings: McpSettings
    registry: Registry
    guard: TransportSecurityMiddleware
    store: ConfigMapStore | None = None

    def routes(self) -> list[Route]:
        return [Route("/admin/tools", self._list, methods=["GET"]),
                Route("/admin/tools/{name}", self._put, methods=["PUT"]),
                Route("/admin/tools/{name}", self._delete, methods=["DELETE"])]

    async def _denied(self, request: Request) -> Response | None:
        refused = await self.guard.validate_request(request, is_post=False)
        if refused is not None:  # the admin API is no less exposed to DNS rebinding
            return refused
        path = self.settings.admin_token_file
        if path is None:
            return JSONResponse({"error": "the admin API is disabled; start llmop mcp with "
                                 "--admin-token-file"}, 404)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError:
            log.error("admin token file %s is unreadable; refusing admin requests", path)
            return JSONResponse({"error": "admin token unavailable on the server"}, 503)
        given = request.headers.get("authorization", "")
        scheme, _, value = given.partition(" ")
        if not token or scheme.lower() != "bearer" or not hmac.compare_digest(
                value.strip().encode(), token.encode()):
            return JSONResponse({"error": "send the admin token as Authorization: Bearer "
                                 "<token>"}, 401, headers={"WWW-Authenticate": "Bearer"})
        return None

    async def _list(self, request: Request) -> Response:
        if (denied := await self._denied(request)) is not None:
            return denied
        return JSONResponse([{"toolName": r.tool_name, "modelId": r.model_id,
                              "endpoint": r.endpoint, "phase": r.facets.phase,
                              "source": r.source} for r in self.registry.catalog.tools()])

    async def _put(self, request: Request) -> Response:
        if (denied := await self._denied(request)) is not None:
            return denied
        name = request.path_params["name"]
        body = await read_body(request.receive, ADMIN_MAX_BODY)
        if body is None:
            return JSONResponse({"error": f"body exceeds {ADMIN_MAX_BODY} bytes",
                                 "toolName": name}, 413)
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            return JSONResponse({"error": "body must be JSON"}, 400)
        try:
            record = from_admin(name, payload, self.settings.admin_endpoint_hosts)
        except AdminPayloadError as exc:
            return JSONResponse({"error": str(exc), "toolName": name}, 400)
        if record.tool_name == LIST_TOOL:
            return JSONResponse({"error": f"{LIST_TOOL} is the server's own tool; choose "
                                 "another name", "toolName": name}, 409)
        catalog = self.registry.catalog
        owner = catalog.outranked(record.tool_name, "admin")
        if owner is not None:
            return JSONResponse({"error": f"tool {record.tool_name} is already served from "
                                 f"{owner.source} ({owner.key}), which takes precedence: "
                                 "choose another name or change it there",
                                 "toolName": name}, 409)
        stored = await self._store(lambda store: store.put(name, payload), name)
        if stored is not None:
            return stored
        # served here at once (read and replaced with no await between); other replicas
        # follow the ConfigMap
        records = [r for r in catalog.records("admin") if r.key != name]
        await self.registry.publish("admin", [*records, record])
        return JSONResponse({"status": "registered", "toolName": name})

    async def _store(self, write: Callable[[ConfigMapStore], Awaitable[None]], name: str
                     ) -> Response | None:
        """Write through to the shared store, if there is one; a 503 saying why if it fails."""
        if self.store is None:
            return None
        try:
            await write(self.store)
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.error("admin store %s/%s: %s", self.store.namespace, self.store.name, exc)
            return JSONResponse({"error": "the registration store (a ConfigMap) is "
                                 "unavailable; nothing was changed, try again",
                                 "toolName": name}, 503, headers={"Retry-After": "5"})
        return None

    async def _delete(self, request: Request) -> Response:
        if (denied := await self._denied(request)) is not None:
            return denied
        name = request.path_params["name"]
        records = self.registry.catalog.records("admin")
        if not any(r.key == name for r in records):
            return JSONResponse({"error": "tool not found", "toolName": name}, 404)
        stored = await self._store(lambda store: store.delete(name), name)
        if stored is not None:
            return stored
        await self.registry.publish("admin", [r for r in records if r.key != name])
        return JSONResponse({"status": "unregistered", "toolName": name})
