"""The MCP server: the tool catalog, its MCP handlers, and the app of /mcp, health and admin."""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import contextlib
import json
import logging
import math
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import uvicorn
from mcp.server import InitializationOptions, NotificationOptions, Server, ServerRequestContext
from mcp.server.auth.routes import create_protected_resource_routes
from mcp.server.context import CallNext, HandlerResult
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.exceptions import MCPError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from llm_operator import __version__
from llm_operator.access.keyfile import KeyringSource
from llm_operator.connectors import tcp_connector
from llm_operator.mcp_server import requestids
from llm_operator.mcp_server.admin import AdminApi
from llm_operator.mcp_server.auth import CALLER, Caller, McpAuth
from llm_operator.mcp_server.calls import ModelCalls, failure
from llm_operator.mcp_server.endpoint import McpEndpoint, live_sessions
from llm_operator.mcp_server.judging import CatalogJudges
from llm_operator.mcp_server.listing_cache import ListingCache
from llm_operator.mcp_server.metrics import McpMetrics
from llm_operator.mcp_server.notify import Broadcaster
from llm_operator.mcp_server.oauth import TokenVerifier, resource_metadata_url
from llm_operator.mcp_server.sessions import SessionLedger
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.registry.catalog import Catalog, Source, ToolRecord
from llm_operator.registry.tools import (
    LIST_TOOL,
    ArgumentError,
    list_query,
    list_result,
    list_tool,
    model_tool,
)

log = logging.getLogger(__name__)
INSTRUCTIONS = ("Each tool but list_available_models is one language model. Call "
                "list_available_models to compare them (domains, context window, thinking "
                "support), then call the model's tool with OpenAI-style messages.")
MAX_CACHED_PAGES = 256  # cursors come from clients: bound what they can make us keep


class _Server(Server[Any]):
    """The SDK's low-level server, announcing tools.listChanged to handshake-era clients too."""

    def create_initialization_options(
            self, notification_options: NotificationOptions | None = None,
            experimental_capabilities: dict[str, dict[str, Any]] | None = None,
            extensions: dict[str, dict[str, Any]] | None = None) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities, extensions)


CURSOR_PREFIX = "after:"  # what a cursor we issued decodes to, before the last name served


def _cursor(name: str) -> str:
    return base64.urlsafe_b64encode(f"{CURSOR_PREFIX}{name}".encode()).decode()


def _after(cursor: str) -> str:
    """The last name a cursor we issued had served; anything else is -32602."""
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if not text.startswith(CURSOR_PREFIX) or _cursor(text[len(CURSOR_PREFIX):]) != cursor:
        raise MCPError(types.INVALID_PARAMS, "invalid cursor: pass nextCursor from the "
                       "previous tools/list result unchanged")
    return text[len(CURSOR_PREFIX):]


@dataclass
class McpService:
    """The catalog behind an MCP endpoint; sources publish into it, clients read and call."""

    settings: McpSettings = field(default_factory=McpSettings)
    catalog: Catalog = field(default_factory=Catalog)
    background: list[Callable[[], Coroutine[Any, Any, None]]] = field(default_factory=list)
    readiness: list[asyncio.Event] = field(default_factory=list)
    broadcaster: Broadcaster = field(default_factory=Broadcaster)

    def __post_init__(self) -> None:
        self.server: Server[Any] = _Server(
            "llm-operator", version=__version__, title="LLM models as tools",
            instructions=INSTRUCTIONS, on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.broadcaster.bus))
        self.server.middleware += [_with_request_id, self.broadcaster.middleware,
                                   self._memoize_listing]
        self._http: aiohttp.ClientSession | None = None
        self.metrics = McpMetrics()
        self._lock = asyncio.Lock()
        self._published = asyncio.Condition()
        self._listing: tuple[int, list[tuple[str, types.Tool]]] = (-1, [])
        self._listing_models: dict[str, str] = {}  # tool name -> model id, with _listing
        self._pages: dict[tuple[int, str, str | None, object], HandlerResult] = {}
        self._guard = TransportSecurityMiddleware(self.settings.transport_security())
        self.auth = self._auth()
        self.calls = ModelCalls(self.settings, self.metrics, self.auth,
                                judges=CatalogJudges(self.catalog, lambda: self.calls.http))
        self.admin = AdminApi(self.settings, self, self._guard)  # .store: set to share

    def _auth(self) -> McpAuth | None:
        """Bearer-token checks, when client keys or an OAuth issuer are configured."""
        settings = self.settings
        if settings.client_keys_file is None and settings.oauth_issuer is None:
            return None
        keys = KeyringSource(settings.client_keys_file) if settings.client_keys_file else None
        if settings.oauth_issuer is None:
            return McpAuth(keys)
        if settings.resource_url is None:
            raise ValueError("an OAuth issuer needs the resource URL: this server's public "
                             "/mcp URL, which its tokens must name as audience")
        verifier = TokenVerifier(settings.oauth_issuer, settings.resource_url, self._get_json)
        return McpAuth(keys, verifier, resource_metadata_url(settings.resource_url))

    async def _get_json(self, url: str) -> Any:
        """GET a JSON document (the issuer's metadata and keys); OSError when it fails."""
        assert self._http is not None
        try:
            async with self._http.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
                r.raise_for_status()
                return await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise OSError(f"GET {url}: {exc}") from None

    # --- the registry ---

    async def publish(self, source: Source, records: list[ToolRecord]) -> None:
        """Replace one source's records; notify every client when the tool list changed."""
        async with self._lock:
            changed = self.catalog.replace(source, records)
            for hidden, winner in self.catalog.shadowed:
                log.warning("tool %s from %s %s is hidden by %s %s", hidden.tool_name,
                            hidden.source, hidden.key, winner.source, winner.key)
        if changed:
            log.info("tool list changed: %d model tools", len(self.catalog))
            await self.broadcaster.tools_changed()
        async with self._published:
            self._published.notify_all()

    async def until(self, check: Callable[[], bool], timeout: float = 10) -> None:
        """Wait until ``check()`` holds, re-checked after every publish (tests, local runtime)."""
        async with asyncio.timeout(timeout), self._published:
            await self._published.wait_for(check)

    def publisher(self, source: Source) -> Callable[[list[ToolRecord]], Awaitable[None]]:
        async def publish(records: list[ToolRecord]) -> None:
            await self.publish(source, records)
        return publish

    # --- MCP handlers ---

    async def _memoize_listing(self, ctx: ServerRequestContext[Any],
                               call_next: CallNext) -> HandlerResult:
        """Serve a tools/list page the SDK already validated and shaped, while nothing changed.

        The SDK checks every result against the protocol's types (about 0.2 ms per tool);
        a page only changes with the catalog, so each (version, era, cursor) is shaped once.
        """
        if ctx.method != "tools/list":
            return await call_next(ctx)
        cursor = (ctx.params or {}).get("cursor")
        version = self.catalog.version
        caller = _caller(ctx)
        allowed = None if caller is None or caller.key is None else \
            caller.key.models_and_tools  # pages differ by allowance, not by key
        key = (version, ctx.protocol_version, cursor if isinstance(cursor, str) else None,
               allowed)
        if key in self._pages:
            return self._pages[key]
        result = await call_next(ctx)
        if self.catalog.version == version:
            if len(self._pages) >= MAX_CACHED_PAGES or any(k[0] != version for k in self._pages):
                self._pages.clear()
            self._pages[key] = result
        return result

    async def _list_tools(self, ctx: ServerRequestContext[Any],
                          params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        # The meta-tool first, then models by name; a cursor is the last name served ("" for
        # the meta-tool), so pages stay consistent while models come and go.
        entries = self._entries()
        caller = _caller(ctx)
        if caller is not None and caller.key is not None:
            models = self._listing_models
            entries = [e for e in entries if not e[0] or caller.may_call(e[0], models.get(e[0]))]
        cursor = params.cursor if params is not None else None
        if cursor is not None:
            after = _after(cursor)
            entries = entries[bisect.bisect_right(entries, after, lo=1, key=lambda e: e[0]):]
        page = entries[:self.settings.page_size]
        more = len(entries) > len(page)
        return types.ListToolsResult(tools=[tool for _, tool in page],
                                     next_cursor=_cursor(page[-1][0]) if more else None)

    def _entries(self) -> list[tuple[str, types.Tool]]:
        """(name, tool) in listing order, rebuilt only when the catalog changes."""
        if self._listing[0] != self.catalog.version:
            records = [r for r in self.catalog.tools() if r.tool_name != LIST_TOOL]
            entries = [("", types.Tool.model_validate(list_tool()))]
            entries += [(r.tool_name, types.Tool.model_validate(model_tool(r))) for r in records]
            self._listing = (self.catalog.version, entries)
            self._listing_models = {r.tool_name: r.model_id for r in records}
        return self._listing[1]

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = _caller(ctx)
        try:
            if params.name == LIST_TOOL:
                found = [r for r in self.catalog.find(list_query(params.arguments))
                         if caller is None or caller.may_call(r.tool_name, r.model_id)]
                result = list_result(found)
                return types.CallToolResult(
                    content=[types.TextContent(type="text", text=json.dumps(result, indent=2))],
                    structured_content=result)
            record = self.catalog.get(params.name)
            if record is None:  # a protocol error: the tool does not exist
                raise MCPError(types.INVALID_PARAMS, self._unknown(params.name))
            if caller is None:
                return await self.calls.call(record, params.arguments)
            return await self.calls.as_caller(caller, record, params.arguments)
        except ArgumentError as exc:  # a tool error the model can read and correct (SEP-1303)
            self.metrics.calls.labels(params.name, "invalid_arguments").inc()
            return failure(f"invalid arguments for {params.name}: {exc}")

    def _unknown(self, name: str) -> str:
        known = self.catalog.not_callable(name)
        if known is None:
            return f"Unknown tool: {name}. Call tools/list (or {LIST_TOOL}) for the tools."
        phase = known.facets.phase or "not yet reported"
        return (f"tool {name} is not callable now: model {known.model_id} is {phase}; it "
                "becomes available when its phase is Ready or Proxying")

    # --- HTTP: health, readiness ---

    async def _health(self, _: Request) -> Response:
        return JSONResponse({"status": "ok", "models": len(self.catalog),
                             "tools": len(self.catalog) + 1, "catalogVersion":
                             self.catalog.version})

    async def _ready(self, _: Request) -> Response:
        waiting = sum(not e.is_set() for e in self.readiness)
        if waiting:
            return JSONResponse({"status": "syncing", "sourcesWaiting": waiting}, 503)
        return JSONResponse({"status": "ready", "models": len(self.catalog)})

    # --- the ASGI app ---

    def app(self) -> Starlette:
        security = self.settings.transport_security()
        sessions = StreamableHTTPSessionManager(
            self.server, security_settings=security, json_response=self.settings.session_json,
            session_idle_timeout=self.settings.session_idle_seconds)
        async def metrics_endpoint(_: Request) -> Response:
            self.metrics.sessions.set(len(live_sessions(sessions)))
            self.metrics.listeners.set(self.broadcaster.legacy_listeners())
            return Response(generate_latest(self.metrics.registry),
                            media_type=CONTENT_TYPE_LATEST)
        # The guide's curl commands: bare JSON-RPC POSTs with no handshake and no headers.
        single = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True,
                                              security_settings=security)
        self.listings = ListingCache(lambda: self.catalog.version)
        endpoint = McpEndpoint(
            self.auth, self.metrics, self._guard, sessions,
            self.broadcaster.track_streams(sessions.handle_request), single,
            self.listings if self.settings.listing_cache else None,
            SessionLedger(self.settings.sessions_per_client),
            str(math.ceil(self.settings.session_idle_seconds)))

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            # No connection cap of its own (aiohttp's default is 100): the per-tool slots are
            # the one, explicit limit.
            async with aiohttp.ClientSession(connector=tcp_connector(limit=0)) as http, \
                    sessions.run(), single.run(), \
                    anyio.create_task_group() as tg:
                self._http = self.calls.http = http
                for job in self.background:
                    tg.start_soon(job)
                yield
                tg.cancel_scope.cancel()

        extra: Sequence[BaseRoute] = ()
        if self.settings.oauth_issuer is not None and self.settings.resource_url is not None:
            extra = create_protected_resource_routes(
                AnyHttpUrl(self.settings.resource_url), [AnyHttpUrl(self.settings.oauth_issuer)],
                resource_name="llm-operator models as MCP tools")
        return Starlette(routes=[
            *extra,
            Route("/mcp", endpoint, methods=["GET", "POST", "DELETE"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/ready", self._ready, methods=["GET"]),
            *self.admin.routes(),
        ], lifespan=lifespan)

    def uvicorn_server(self, log_level: str = "info") -> uvicorn.Server:
        # h11, named: uvicorn's "auto" switches to httptools when it is installed (the
        # gateway needs it), whose laxer header checks fail MCP's header-validation tests.
        config = uvicorn.Config(self.app(), host=self.settings.host, port=self.settings.port,
                                log_level=log_level, lifespan="on", access_log=False,
                                http="h11",
                                timeout_graceful_shutdown=self.settings.drain_seconds)
        return uvicorn.Server(config)

    async def serve(self, sock: socket.socket | None = None, log_level: str = "info") -> None:
        """Serve until cancelled (on ``sock`` when given, e.g. a loopback port for tests)."""
        server = self.uvicorn_server(log_level)
        await server.serve(sockets=[sock] if sock is not None else None)


async def _with_request_id(ctx: ServerRequestContext[Any], call_next: CallNext
                           ) -> HandlerResult:
    """Server middleware: the handler's log lines carry its HTTP request's id.

    A 2025-era session's handlers run in the session's task, not the request's, so the id
    travels in the ASGI scope rather than the context the request arrived in.
    """
    scope = getattr(ctx.request, "scope", None)
    rid = scope.get(requestids.SCOPE_KEY) if isinstance(scope, dict) else None
    token = requestids.current.set(rid or requestids.NONE)
    try:
        return await call_next(ctx)
    finally:
        requestids.current.reset(token)


def _caller(ctx: ServerRequestContext[Any]) -> Caller | None:
    """The authenticated client of a request (None when /mcp needs no token)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    caller = scope.get(CALLER) if isinstance(scope, dict) else None
    return caller if isinstance(caller, Caller) else None
