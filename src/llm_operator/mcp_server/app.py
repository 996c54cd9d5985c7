"""The MCP server: models as tools over Streamable HTTP (both eras), plus health and admin API."""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import contextlib
import hmac
import json
import logging
import math
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import uvicorn
from mcp.server import InitializationOptions, NotificationOptions, Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import create_protected_resource_routes
from mcp.server.context import CallNext, HandlerResult
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import ListenHandler
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp.shared.exceptions import MCPError
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from llm_operator import __version__
from llm_operator.access.keyfile import KeyringSource
from llm_operator.connectors import tcp_connector
from llm_operator.kube import ApiError
from llm_operator.mcp_server import failures, requestids
from llm_operator.mcp_server.admin_store import ConfigMapStore
from llm_operator.mcp_server.auth import CALLER, Caller, Denied, McpAuth
from llm_operator.mcp_server.listing_cache import ListingCache, listing_key
from llm_operator.mcp_server.metrics import McpMetrics
from llm_operator.mcp_server.notify import Broadcaster
from llm_operator.mcp_server.oauth import TokenVerifier, resource_metadata_url
from llm_operator.mcp_server.sessions import (
    DEFAULT_IDLE_SECONDS,
    DEFAULT_PER_CLIENT,
    SessionLedger,
)
from llm_operator.registry.catalog import AdminPayloadError, Catalog, Source, ToolRecord, from_admin
from llm_operator.registry.tools import (
    LIST_TOOL,
    ArgumentError,
    chat_arguments,
    chat_request,
    chat_result,
    list_query,
    list_result,
    list_tool,
    model_tool,
)

log = logging.getLogger(__name__)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
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


@dataclass(frozen=True)
class McpSettings:
    """How the server listens and calls models (``llmop mcp --help`` sets each)."""

    host: str = "127.0.0.1"
    port: int = 3000
    allowed_hosts: Sequence[str] = ()  # extra Host names (in-cluster service names)
    page_size: int = 100
    call_timeout: float = 300.0
    admin_token_file: Path | None = None
    admin_endpoint_hosts: Sequence[str] = ()  # hosts (".suffix" too) pushes may point at
    max_concurrent_calls: int = 256  # per model tool; more wait (llmop_mcp_tool_calls_queued)
    sessions_per_client: int = DEFAULT_PER_CLIENT  # 2025-era sessions one address may hold
    session_idle_seconds: float = DEFAULT_IDLE_SECONDS  # no request, no open stream: ended
    client_keys_file: Path | None = None  # bearer tokens (the gateway's keys file format)
    oauth_issuer: str | None = None  # accept JWT access tokens from this issuer
    resource_url: str | None = None  # this server's public /mcp URL (the tokens' audience)
    # Off only for bench/mcp's baseline: the SDK shaping every listing, SSE session answers.
    listing_cache: bool = True
    session_json: bool = True

    def transport_security(self) -> TransportSecuritySettings:
        """DNS-rebinding protection: only these Host and Origin values reach /mcp."""
        names = [*LOCAL_HOSTS, *self.allowed_hosts]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
            allowed_origins=[o for n in names for scheme in ("http", "https")
                             for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")])


def service_hosts(service: str, namespaces: Sequence[str], cluster_domain: str = "cluster.local"
                  ) -> list[str]:
    """Every name a client inside the cluster may use for the MCP Service."""
    names = [service]
    for ns in namespaces:
        names += [f"{service}.{ns}", f"{service}.{ns}.svc", f"{service}.{ns}.svc.{cluster_domain}"]
    return names


ADMIN_MAX_BODY = 64 * 1024  # one tool's registration
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
        self._slots: dict[str, asyncio.Semaphore] = {}  # per tool: --max-concurrent-calls
        self.admin_store: ConfigMapStore | None = None  # where registrations are shared
        self.metrics = McpMetrics()
        self._lock = asyncio.Lock()
        self._published = asyncio.Condition()
        self._listing: tuple[int, list[tuple[str, types.Tool]]] = (-1, [])
        self._listing_models: dict[str, str] = {}  # tool name -> model id, with _listing
        self._pages: dict[tuple[int, str, str | None, object], HandlerResult] = {}
        self._guard = TransportSecurityMiddleware(self.settings.transport_security())
        self.auth = self._auth()

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
                return await self._call_model(record, params.arguments)
            return await self._call_as(caller, record, params.arguments)
        except ArgumentError as exc:  # a tool error the model can read and correct (SEP-1303)
            self.metrics.calls.labels(params.name, "invalid_arguments").inc()
            return _failure(f"invalid arguments for {params.name}: {exc}")

    async def _call_as(self, caller: Caller, record: ToolRecord,
                       arguments: dict[str, Any] | None) -> types.CallToolResult:
        """A call by an authenticated client: its allow-list, then its calls per minute."""
        assert self.auth is not None
        if not caller.may_call(record.tool_name, record.model_id):
            self.metrics.key_calls.labels(caller.id, "forbidden").inc()
            raise MCPError(types.INVALID_PARAMS, f"key {caller.id!r} may not call tool "
                           f"{record.tool_name}; ask the server's operator to allow it")
        wait = self.auth.call_wait(caller)
        if wait > 0:
            self.metrics.key_calls.labels(caller.id, "rate_limited").inc()
            return _failure(f"rate limit of key {caller.id!r} reached; retry after "
                            f"{math.ceil(wait)} s")
        result = await self._call_model(record, arguments)
        self.metrics.key_calls.labels(caller.id, "error" if result.is_error else "ok").inc()
        return result

    def _unknown(self, name: str) -> str:
        known = self.catalog.not_callable(name)
        if known is None:
            return f"Unknown tool: {name}. Call tools/list (or {LIST_TOOL}) for the tools."
        phase = known.facets.phase or "not yet reported"
        return (f"tool {name} is not callable now: model {known.model_id} is {phase}; it "
                "becomes available when its phase is Ready or Proxying")

    def _slot(self, tool: str) -> asyncio.Semaphore:
        slot = self._slots.get(tool)
        if slot is None:
            slot = self._slots[tool] = asyncio.Semaphore(self.settings.max_concurrent_calls)
        return slot

    async def _call_model(self, record: ToolRecord, arguments: dict[str, Any] | None
                          ) -> types.CallToolResult:
        """Wait for one of the model's slots (its own timeout), then call it (another)."""
        args = chat_arguments(arguments, thinking=record.facets.supports_thinking)
        body, thinking = chat_request(record, args)
        tool, metrics = record.tool_name, self.metrics
        who = f"model {record.model_id} ({tool})"
        slot = self._slot(tool)
        metrics.queued.labels(tool).inc()
        waited = time.monotonic()
        try:
            async with asyncio.timeout(self.settings.call_timeout):
                await slot.acquire()
        except TimeoutError:
            metrics.calls.labels(tool, "timeout").inc()
            return _failure(f"{who} had no free slot within {self.settings.call_timeout:g} s: "
                            f"{self.settings.max_concurrent_calls} calls to it are in flight; "
                            "try again shortly")
        finally:
            metrics.queued.labels(tool).dec()
        metrics.queue_wait.labels(tool).observe(time.monotonic() - waited)
        metrics.in_flight.labels(tool).inc()
        started = time.monotonic()
        try:
            result, outcome = await self._post(record, body, thinking, who)
        finally:
            slot.release()
            metrics.in_flight.labels(tool).dec()
            metrics.duration.labels(tool).observe(time.monotonic() - started)
        metrics.calls.labels(tool, outcome).inc()
        usage = (result.structured_content or {}).get("usage") or {}
        for kind, key in (("prompt", "promptTokens"), ("completion", "completionTokens")):
            if usage.get(key):
                metrics.tokens.labels(tool, kind).inc(usage[key])
        return result

    async def _post(self, record: ToolRecord, body: dict[str, Any], thinking: bool, who: str
                    ) -> tuple[types.CallToolResult, str]:
        """One call to the model's endpoint: the tool result and its outcome label."""
        assert self._http is not None and record.endpoint
        url = f"{record.endpoint.rstrip('/')}/{record.path}"
        try:
            async with self._http.post(url, json=body, timeout=aiohttp.ClientTimeout(
                    total=self.settings.call_timeout)) as r:
                raw = await r.text(errors="replace")
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = None
                if r.status >= 400:  # the agent gets the meaning; the log, the detail
                    log.warning("%s answered HTTP %d: %s", who, r.status,
                                failures.detail(payload, raw))
                    return _failure(failures.summary(who, r.status)), "upstream_error"
            text, structured = chat_result(record, payload, thinking)
        except TimeoutError:
            return _failure(f"{who} did not answer within {self.settings.call_timeout:g} s"), \
                "timeout"
        except aiohttp.ClientError as exc:
            return _failure(f"could not reach {who} ({type(exc).__name__}); it may be starting "
                            "or scaling up, try again shortly"), "unreachable"
        except ValueError:
            return _failure(f"{who} returned a response that is not a chat completion"), \
                "bad_response"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured), "ok"

    # --- HTTP: health, readiness, admin ---

    async def _health(self, _: Request) -> Response:
        return JSONResponse({"status": "ok", "models": len(self.catalog),
                             "tools": len(self.catalog) + 1, "catalogVersion":
                             self.catalog.version})

    async def _ready(self, _: Request) -> Response:
        waiting = sum(not e.is_set() for e in self.readiness)
        if waiting:
            return JSONResponse({"status": "syncing", "sourcesWaiting": waiting}, 503)
        return JSONResponse({"status": "ready", "models": len(self.catalog)})

    async def _admin_denied(self, request: Request) -> Response | None:
        refused = await self._guard.validate_request(request, is_post=False)
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

    async def _admin_list(self, request: Request) -> Response:
        if (denied := await self._admin_denied(request)) is not None:
            return denied
        return JSONResponse([{"toolName": r.tool_name, "modelId": r.model_id,
                              "endpoint": r.endpoint, "phase": r.facets.phase,
                              "source": r.source} for r in self.catalog.tools()])

    async def _admin_put(self, request: Request) -> Response:
        if (denied := await self._admin_denied(request)) is not None:
            return denied
        name = request.path_params["name"]
        body = await _read_limited(request, ADMIN_MAX_BODY)
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
        owner = self.catalog.outranked(record.tool_name, "admin")
        if owner is not None:
            return JSONResponse({"error": f"tool {record.tool_name} is already served from "
                                 f"{owner.source} ({owner.key}), which takes precedence: "
                                 "choose another name or change it there",
                                 "toolName": name}, 409)
        stored = await self._store(lambda store: store.put(name, payload), name)
        if stored is not None:
            return stored
        async with self._lock:  # served here at once; other replicas follow the ConfigMap
            records = [r for r in self.catalog.records("admin") if r.key != name]
        await self.publish("admin", [*records, record])
        return JSONResponse({"status": "registered", "toolName": name})

    async def _store(self, write: Callable[[ConfigMapStore], Awaitable[None]], name: str
                     ) -> Response | None:
        """Write through to the shared store, if there is one; a 503 saying why if it fails."""
        if self.admin_store is None:
            return None
        try:
            await write(self.admin_store)
        except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.error("admin store %s/%s: %s", self.admin_store.namespace,
                      self.admin_store.name, exc)
            return JSONResponse({"error": "the registration store (a ConfigMap) is "
                                 "unavailable; nothing was changed, try again",
                                 "toolName": name}, 503, headers={"Retry-After": "5"})
        return None

    async def _admin_delete(self, request: Request) -> Response:
        if (denied := await self._admin_denied(request)) is not None:
            return denied
        name = request.path_params["name"]
        records = self.catalog.records("admin")
        if not any(r.key == name for r in records):
            return JSONResponse({"error": "tool not found", "toolName": name}, 404)
        stored = await self._store(lambda store: store.delete(name), name)
        if stored is not None:
            return stored
        await self.publish("admin", [r for r in records if r.key != name])
        return JSONResponse({"status": "unregistered", "toolName": name})

    # --- the ASGI app ---

    def app(self) -> Starlette:
        security = self.settings.transport_security()
        sessions = StreamableHTTPSessionManager(
            self.server, security_settings=security, json_response=self.settings.session_json,
            session_idle_timeout=self.settings.session_idle_seconds)
        ledger = SessionLedger(self.settings.sessions_per_client)
        retry_after = str(math.ceil(self.settings.session_idle_seconds))

        def live() -> Collection[str]:  # the SDK's open sessions (mcp 2.x keeps them here)
            instances: Collection[str] = getattr(sessions, "_server_instances", {})
            return instances

        async def metrics_endpoint(_: Request) -> Response:
            self.metrics.sessions.set(len(live()))
            self.metrics.listeners.set(self.broadcaster.legacy_listeners())
            return Response(generate_latest(self.metrics.registry),
                            media_type=CONTENT_TYPE_LATEST)
        # The guide's curl commands: bare JSON-RPC POSTs with no handshake and no headers.
        single = StreamableHTTPSessionManager(self.server, stateless=True, json_response=True,
                                              security_settings=security)
        tracked = self.broadcaster.track_streams(sessions.handle_request)
        guard = self._guard
        listings = self.listings = ListingCache(lambda: self.catalog.version)

        auth, metrics, cache = self.auth, self.metrics, self.settings.listing_cache

        class Endpoint:
            async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
                rid = scope[requestids.SCOPE_KEY] = requestids.request_id(Headers(scope=scope))
                requestids.current.set(rid)

                async def send_with_id(message: Message) -> None:
                    if message["type"] == "http.response.start":
                        message["headers"] = [*message.get("headers", []),
                                              (b"x-request-id", rid.encode())]
                    await send(message)

                await self.serve(scope, receive, send_with_id)

            async def authenticated(self, scope: Scope, receive: Receive, send: Send
                                    ) -> bool:
                """With tokens configured: note the caller in the scope, or answer 401."""
                if auth is None:
                    return True
                try:
                    caller = await auth.caller(Headers(scope=scope))
                except Denied as denied:
                    metrics.auth_failures.labels(denied.error).inc()
                    await JSONResponse(
                        {"error": denied.error, "error_description": denied.description},
                        401, headers={"WWW-Authenticate": auth.challenge(denied)})(
                            scope, receive, send)
                    return False
                scope[CALLER] = caller
                # The SDK binds each session to the credential that opened it.
                scope["user"] = AuthenticatedUser(AccessToken(
                    token="", client_id=caller.id, scopes=[]))
                scope["auth"] = AuthCredentials([])
                return True

            async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
                if not await self.authenticated(scope, receive, send):
                    return  # who is asking, before anything else
                if scope["method"] != "POST":
                    await tracked(scope, receive, send)
                    return
                # Host and Origin before the body: a forged Host never costs a 5 MB read.
                refused = await guard.validate_request(Request(scope), is_post=False)
                if refused is not None:
                    await refused(scope, receive, send)
                    return
                body = await _read_body(receive)
                if body is None:
                    await Response("Request body too large", 413)(scope, receive, send)
                    return
                problem = envelope_problem(body)
                if problem is not None:
                    await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                        "code": problem[0], "message": problem[1]}}, 400)(scope, receive, send)
                    return
                replay = _replaying(body, receive)
                message = json.loads(body)
                modern = b"mcp-protocol-version" in dict(scope["headers"])
                caller = scope.get(CALLER)
                key = listing_key(scope, message, caller.key.models_and_tools
                                  if isinstance(caller, Caller) and caller.key else None)
                if key is not None and cache:  # stateless tools/list: replayed while unchanged
                    handler = tracked if modern else single.handle_request
                    await listings.serve(key, message["id"], handler, (scope, replay, send))
                elif b"mcp-session-id" in dict(scope["headers"]) or modern:
                    await tracked(scope, replay, send)
                elif message.get("method") != "initialize":
                    await single.handle_request(scope, replay, send)
                else:
                    await self.open_session(scope, replay, send)

            async def open_session(self, scope: Scope, replay: Receive, send: Send) -> None:
                """A 2025-era initialize: within the client's session budget, noted in it."""
                client = str((scope.get("client") or ("unknown",))[0])
                if not ledger.admit(client, live()):
                    log.warning("refused a new MCP session: %s holds %d already", client,
                                ledger.holding(client))
                    await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                        "code": -32000, "message": f"this client holds {ledger.per_client} "
                        "MCP sessions already (the limit per client): reuse one, or end one "
                        "with DELETE /mcp"}}, 429, headers={"Retry-After": retry_after})(
                            scope, replay, send)
                    return

                reserved = True

                async def noting_send(message: Message) -> None:
                    nonlocal reserved
                    if message["type"] == "http.response.start" and reserved:
                        reserved = False
                        sid = dict(message.get("headers") or []).get(b"mcp-session-id")
                        if sid:
                            ledger.opened(client, sid.decode("latin-1"))
                        else:
                            ledger.release(client)
                    await send(message)

                try:
                    await sessions.handle_request(scope, replay, noting_send)
                finally:
                    if reserved:  # no response started (the client left)
                        ledger.release(client)

        @contextlib.asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            # No connection cap of its own (aiohttp's default is 100): the per-tool slots are
            # the one, explicit limit.
            async with aiohttp.ClientSession(connector=tcp_connector(limit=0)) as http, \
                    sessions.run(), single.run(), \
                    anyio.create_task_group() as tg:
                self._http = http
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
            Route("/mcp", Endpoint(), methods=["GET", "POST", "DELETE"]),
            Route("/health", self._health, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            Route("/ready", self._ready, methods=["GET"]),
            Route("/admin/tools", self._admin_list, methods=["GET"]),
            Route("/admin/tools/{name}", self._admin_put, methods=["PUT"]),
            Route("/admin/tools/{name}", self._admin_delete, methods=["DELETE"]),
        ], lifespan=lifespan)

    def uvicorn_server(self, log_level: str = "info") -> uvicorn.Server:
        # h11, named: uvicorn's "auto" switches to httptools when it is installed (the
        # gateway needs it), whose laxer header checks fail MCP's header-validation tests.
        config = uvicorn.Config(self.app(), host=self.settings.host, port=self.settings.port,
                                log_level=log_level, lifespan="on", access_log=False,
                                http="h11")
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


def _failure(message: str) -> types.CallToolResult:
    log.warning("tool call failed: %s", message)
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


def envelope_problem(body: bytes) -> tuple[int, str] | None:
    """Why a POSTed body is not one JSON-RPC message (code, short message); None if it is.

    Checked before the SDK sees it: its own answers to ``{}`` or a batch named pydantic
    internals, and a request with ``"id": null`` got a silent 202.
    """
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return types.PARSE_ERROR, "Parse error: the body is not JSON"
    if isinstance(message, list):
        return types.INVALID_REQUEST, ("JSON-RPC batches are not supported (MCP removed them "
                                       "in 2025-06-18): send one message per request")
    if not isinstance(message, dict):
        return types.INVALID_REQUEST, "a JSON-RPC message must be a JSON object"
    if message.get("jsonrpc") != "2.0":
        return types.INVALID_REQUEST, 'the message needs "jsonrpc": "2.0"'
    if "id" in message and (isinstance(message["id"], bool)
                            or not isinstance(message["id"], str | int)):
        return types.INVALID_REQUEST, "id must be a string or an integer (MCP forbids null)"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return types.INVALID_REQUEST, "method must be a non-empty string"
    elif "id" not in message or not ("result" in message or "error" in message):
        return types.INVALID_REQUEST, ("the message is neither a request (method), a "
                                       "notification, nor a response (id with result or error)")
    return None


async def _read_body(receive: Receive, limit: int = DEFAULT_MAX_REQUEST_BODY_SIZE
                     ) -> bytes | None:
    """The whole body, or None once it passes ``limit`` bytes (not read further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _read_limited(request: Request, limit: int) -> bytes | None:
    """A Starlette request's body, or None once it passes ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
