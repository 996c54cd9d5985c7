"""One request's context on its way through the gateway's parts: what each part decided."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from llm_operator.access.limits import Reservation
from llm_operator.gateway.flow.bands import Classified
from llm_operator.gateway.inbound.incoming import Incoming
from llm_operator.gateway.path.answers import HeldStream
from llm_operator.gateway.path.guarded_stream import GuardedStream
from llm_operator.gateway.routing.client_keys import Client
from llm_operator.gateway.routing.routes import Deployment, Outbound, RouteState
from llm_operator.gateway.telemetry.tracing import RequestTrace

AnswerGuard = Callable[[bytes], Awaitable["bytes | web.Response"]]


def _unshaped(deployment: Deployment) -> Outbound:
    raise AssertionError(f"no outbound request was shaped for {deployment.label}")


@dataclass(slots=True, eq=False)
class Exchange:
    """A request and what the parts before have decided of it.

    Each part reads what earlier parts set and sets its own fields; none keeps a request's
    state of its own. ``state`` is set by Resolve: parts after it may read it.
    """

    request: Incoming  # aiohttp's, or the gateway server's (server/http.py)
    started: float  # the gateway's clock when the request came in
    trace: RequestTrace | None  # None: tracing is off
    anthropic: bool = False  # came to /v1/messages: translated in, and its answer back
    # Identify: who is asking (client keys, or the batch runner acting as a batch's owner)
    client: Client | None = None
    batch_run: bool = False  # sent by the batch runner: batch prices
    # Classify: flow control's band and fairness ID (None: flow control is off)
    who: Classified | None = None
    # ReadBody: the body as received (or translated), its JSON and its model
    raw: bytes = b""
    body: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    # Resolve (and Hold, and a reroute): the route and its live replicas
    state: RouteState = field(init=False)
    routed: bool = False  # whether ``state`` is set
    # Guard: the route's output guards, run on a plain answer's body (its bytes again, or
    # the refusal to answer instead)
    answer_guard: AnswerGuard | None = None
    # or, for a stream, its text through the output guards as it comes (PII guards on a
    # held-back window, judges and moderation at each judge window)
    stream_guard: GuardedStream | None = None
    # Hold: a stream answered 200 with keepalives while its model had no replica
    held: HeldStream | None = None
    # Hold or Relay: a stream's headers went out, so an error cannot be an answer of its own
    # (it becomes the stream's last event)
    headers_sent: bool = False
    # Relay (a stream counts itself as it ends) or ToOwner (the owner counts it): the
    # request path does not count the answer
    counted_elsewhere: bool = False
    # Forward: it failed where the replica may be gone (no connection, an open circuit):
    # Reroute may find another
    unreachable: bool = False
    # Limit: the tokens reserved against the route's and the key's allowances
    reservation: Reservation = field(default_factory=Reservation)
    # Shape: how the upstream is asked (a stream, usage asked for, a stream collected)
    stream: bool = False
    hide_usage: bool = False
    collect: bool = False
    # what goes to each deployment (Untranslatable when it cannot take the request)
    outbound: Callable[[Deployment], Outbound] = _unshaped

    def route(self, state: RouteState) -> None:
        self.state, self.routed = state, True
