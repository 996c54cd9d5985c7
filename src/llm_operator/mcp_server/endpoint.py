"""/mcp as an ASGI app: who is asking, the body's checks, then the SDK transport that fits.

Clients of both eras share the path: 2025-era sessions (initialize, then a session id),
2026-era stateless requests (an MCP-Protocol-Version header), and the guide's bare curl
POSTs with neither, answered by a stateless JSON transport.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection
from dataclasses import dataclass

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from starlette.authentication import AuthCredentials
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from llm_operator.mcp_server import requestids
from llm_operator.mcp_server.auth import CALLER, Caller, Denied, McpAuth
from llm_operator.mcp_server.envelope import envelope_problem, read_body, replaying
from llm_operator.mcp_server.listing_cache import ListingCache, listing_key
from llm_operator.mcp_server.metrics import McpMetrics
from llm_operator.mcp_server.sessions import SessionLedger

log = logging.getLogger(__name__)


def live_sessions(sessions: StreamableHTTPSessionManager) -> Collection[str]:
    """The SDK's open sessions (mcp 2.x keeps them here)."""
    instances: Collection[str] = getattr(sessions, "_server_instances", {})
    return instances


async def end_session(sessions: StreamableHTTPSessionManager, sid: str) -> None:
    """End a session as the SDK does on DELETE or idle expiry: its id answers 404 at once."""
    transport = sessions._server_instances.get(sid)
    if transport is not None:
        await sessions._discard_session(sid, transport)


@dataclass
class McpEndpoint:
    """The /mcp route.

    ``sessions`` holds 2025-era sessions and serves 2026-era requests, through
    ``tracked`` (the same, with the broadcaster noting open streams); ``single`` answers
    bare POSTs statelessly. ``listings`` replays unchanged stateless tools/list answers
    (None: off).
    """

    auth: McpAuth | None
    metrics: McpMetrics
    guard: TransportSecurityMiddleware
    sessions: StreamableHTTPSessionManager
    tracked: ASGIApp
    single: StreamableHTTPSessionManager
    listings: ListingCache | None
    ledger: SessionLedger
    retry_after: str  # seconds, for a client refused a session: the idle timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        rid = scope[requestids.SCOPE_KEY] = requestids.request_id(Headers(scope=scope))
        requestids.current.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []),
                                      (b"x-request-id", rid.encode())]
            await send(message)

        await self.serve(scope, receive, send_with_id)

    async def authenticated(self, scope: Scope, receive: Receive, send: Send) -> bool:
        """With tokens configured: note the caller in the scope, or answer 401."""
        auth = self.auth
        if auth is None:
            return True
        try:
            caller = await auth.caller(Headers(scope=scope))
        except Denied as denied:
            self.metrics.auth_failures.labels(denied.error).inc()
            await JSONResponse(
                {"error": denied.error, "error_description": denied.description},
                401, headers={"WWW-Authenticate": auth.challenge(denied)})(scope, receive, send)
            return False
        scope[CALLER] = caller
        # The SDK binds each session to the credential that opened it.
        scope["user"] = AuthenticatedUser(AccessToken(token="", client_id=caller.id, scopes=[]))
        scope["auth"] = AuthCredentials([])
        return True

    async def in_session(self, scope: Scope, receive: Receive, send: Send) -> None:
        """A request naming a session: busy (never ended for the cap) until it is answered."""
        sid = dict(scope.get("headers") or []).get(b"mcp-session-id")
        if sid is None:
            await self.tracked(scope, receive, send)
            return
        session = sid.decode("latin-1")
        self.ledger.begin(session)
        try:
            await self.tracked(scope, receive, send)
        finally:
            self.ledger.end(session)

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not await self.authenticated(scope, receive, send):
            return  # who is asking, before anything else
        if scope["method"] != "POST":
            await self.in_session(scope, receive, send)
            return
        # Host and Origin before the body: a forged Host never costs a 5 MB read.
        refused = await self.guard.validate_request(Request(scope), is_post=False)
        if refused is not None:
            await refused(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            await Response("Request body too large", 413)(scope, receive, send)
            return
        problem = envelope_problem(body)
        if problem is not None:
            await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                "code": problem[0], "message": problem[1]}}, 400)(scope, receive, send)
            return
        replay = replaying(body, receive)
        message = json.loads(body)
        modern = b"mcp-protocol-version" in dict(scope["headers"])
        caller = scope.get(CALLER)
        key = listing_key(scope, message, caller.key.models_and_tools
                          if isinstance(caller, Caller) and caller.key else None)
        if key is not None and self.listings is not None:  # replayed while unchanged
            handler = self.tracked if modern else self.single.handle_request
            await self.listings.serve(key, message["id"], handler, (scope, replay, send))
        elif b"mcp-session-id" in dict(scope["headers"]) or modern:
            await self.in_session(scope, replay, send)
        elif message.get("method") != "initialize":
            await self.single.handle_request(scope, replay, send)
        else:
            await self.open_session(scope, replay, send)

    async def open_session(self, scope: Scope, replay: Receive, send: Send) -> None:
        """A 2025-era initialize: within the client's session budget, noted in it.

        At the budget the client's least recently used idle session ends for the new one;
        a client all of whose sessions are busy is refused (429).
        """
        ledger = self.ledger
        client = str((scope.get("client") or ("unknown",))[0])
        admission = ledger.admit(client, live_sessions(self.sessions))
        if not admission.admitted:
            log.warning("refused a new MCP session: %s holds %d already, each busy", client,
                        ledger.holding(client))
            await JSONResponse({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32000, "message": f"this client holds {ledger.per_client} "
                "MCP sessions already (the limit per client), each with a request in "
                "flight or a stream open: wait for one to finish, reuse one, or end one "
                "with DELETE /mcp"}}, 429, headers={"Retry-After": self.retry_after})(
                    scope, replay, send)
            return
        if admission.ends is not None:
            log.info("ended MCP session %s… of %s, its least recently used idle one, for a "
                     "new one (%d per client)", admission.ends[:8], client, ledger.per_client)
            self.metrics.sessions_ended.inc()
            await end_session(self.sessions, admission.ends)

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
            await self.sessions.handle_request(scope, replay, noting_send)
        finally:
            if reserved:  # no response started (the client left)
                ledger.release(client)
