"""The gateway's route table: routes, their deployments (key, breaker, load), limits, listing.

`RouteTable` is the state every request reads: which route serves a model, its upstreams
in the order to try, whether it can serve now, and what /v1/models shows. The request's
parts (gateway/path/parts) read it; app.py composes them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.limits import Limits, limits
from llm_operator.access.spend import Ledger
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.flow.queue import Sizes
from llm_operator.gateway.providers import NATIVE, NativeApi, Untranslatable
from llm_operator.gateway.providers.anthropic import VERSION as ANTHROPIC_VERSION
from llm_operator.gateway.routing.breaker import Breaker
from llm_operator.gateway.routing.client_keys import Client, ClientGate
from llm_operator.gateway.routing.picking import (
    Load,
    PrefixIndex,
    least_loaded,
    prefix_cache_order,
    prefix_order,
    prefix_text,
)
from llm_operator.gateway.settings.config import GatewayConfig, Route, Upstream
from llm_operator.gateway.telemetry.metrics import NO_ROUTE, GatewayMetrics, RouteMetrics
from llm_operator.gateway.upstream.credentials import KeySource

log = logging.getLogger("llm_operator.gateway")

UNAVAILABLE_RETRY_AFTER = "5"
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class Outbound:
    """What goes to one deployment: where, the body, and the parameters left out."""

    url: str
    body: bytes
    dropped: tuple[str, ...] = ()


CHAT_PATH = "/chat/completions"  # the one path a native (translated) upstream serves


@dataclass(slots=True)
class RouteCalls:
    """One route's calls to one upstream: in flight, and when the last ended.

    On the gateway's clock. ``Load`` counts every route's calls to a URL, and a pool's
    members share one. Kept across reconfigures, like the breaker.
    """

    in_flight: int = 0
    last_done: float = 0.0


@dataclass
class Deployment:
    """One upstream of a route, with its key and its circuit breaker."""

    upstream: Upstream
    url_base: str
    key: KeySource | None
    breaker: Breaker
    native: NativeApi | None = None  # a provider's own API, spoken by translation
    load: Load = field(default_factory=Load)  # kept across reconfigures, like the breaker
    calls: RouteCalls = field(default_factory=RouteCalls)  # this route's own

    @property
    def label(self) -> str:
        return self.upstream.label

    def translate(self, body: dict[str, Any], model: str, *, path: str, stream: bool
                  ) -> Outbound:
        """The native API's request for an OpenAI one; Untranslatable if it has none."""
        assert self.native is not None
        if path != CHAT_PATH:
            raise Untranslatable(f"{path}: a native {self.native.name} upstream serves chat "
                                 "completions only (/v1/chat/completions, /v1/messages)")
        request = self.native.translate(body, model, stream=stream,
                                        max_tokens=self.upstream.default_max_tokens)
        return Outbound(f"{self.url_base}{request.path}",
                        json.dumps(request.body, separators=(",", ":")).encode(),
                        request.dropped)

    def auth_headers(self) -> dict[str, str]:
        """Headers for the upstream request; KeyUnavailable if the key cannot be read."""
        headers = {"Content-Type": "application/json", **self.upstream.headers}
        if self.upstream.api == "anthropic" and not any(
                k.lower() == "anthropic-version" for k in headers):
            headers["anthropic-version"] = ANTHROPIC_VERSION
        style = self.upstream.key_style
        if self.key is None or style == "none":
            return headers
        key = self.key.get()
        if style == "bearer":
            headers["Authorization"] = f"Bearer {key}"
        else:
            headers[style] = key
        return headers


@dataclass
class RouteState:
    """A route with its live parts: its deployments, limits and metrics."""

    route: Route
    deployments: list[Deployment]
    metrics: RouteMetrics
    limits: Limits
    index: PrefixIndex  # prefix-cache: what each upstream was sent (kept across reconfigures)
    turn: int = 0  # rotates least-load's ties

    def order(self, pick: float, body: dict[str, Any] | None = None) -> list[Deployment]:
        """The deployments in the order to try, by the route's balancing.

        weighted: first one drawn by weight (``pick`` in [0, 1)), then the others, heaviest
        first; the others: gateway.picking.
        """
        if len(self.deployments) <= 1:
            return self.deployments
        balancing = self.route.balancing
        if balancing.strategy != "weighted":
            by_label = {d.label: d for d in self.deployments}
            loads = {d.label: d.load for d in self.deployments}
            if balancing.strategy == "least-load":
                self.turn += 1
                labels = least_loaded(list(by_label), loads, self.turn)
            elif balancing.strategy == "prefix-cache":
                labels = prefix_cache_order(prefix_text(body or {}, balancing.chars),
                                            list(by_label), loads, balancing.load_bound,
                                            self.index)
            elif balancing.strategy == "model-hash":
                labels = prefix_order(self.route.label, list(by_label), loads,
                                      balancing.load_bound)
            else:
                key = prefix_text(body or {}, balancing.chars)
                labels = prefix_order(key, list(by_label), loads, balancing.load_bound)
            return [by_label[label] for label in labels]
        total = sum(d.upstream.weight for d in self.deployments)
        point, first = pick * total, self.deployments[-1]
        for deployment in self.deployments:
            point -= deployment.upstream.weight
            if point < 0:
                first = deployment
                break
        rest = sorted((d for d in self.deployments if d is not first),
                      key=lambda d: -d.upstream.weight)
        return [first, *rest]


def pools(config: GatewayConfig, headroom: Callable[[str], int] | None = None
          ) -> dict[str, Sizes]:
    """Each flow-control pool's sizes, from its first route's upstreams.

    Capacity: each upstream's ``slots`` (else ``perReplicaConcurrency``) plus its engine
    queue (``headroom`` of its base URL, gateway/flow/saturation.py, which may be negative
    while its KV cache is full; else ``engineQueue``; at least one in all), added up,
    never more than an upstream's ``maxConcurrent``; None when one is unknown (the pool
    is then not flow-controlled). Engine queue: the part of it beyond the slots. Bound:
    their maxConcurrent added up, None when one has none.
    """
    per_replica = config.flow_control.per_replica_concurrency
    queue = config.flow_control.engine_queue
    extra = headroom or (lambda _: queue)
    found: dict[str, Sizes] = {}
    for route in config.routes:
        if route.pool_name in found:
            continue
        capacity = slots = 0
        known = True
        for upstream in route.deployments:
            n = upstream.slots or per_replica
            if n is None:
                known = False
                break
            more = extra(upstream.base_url.rstrip("/"))
            most = upstream.max_concurrent or n + max(0, more)  # never beyond what it takes
            capacity += max(1, min(most, n + more))
            slots += max(1, min(most, n + min(0, more)))
        bounds = [u.max_concurrent for u in route.deployments]
        bound = None if None in bounds or not bounds else \
            sum(b for b in bounds if b is not None)
        if not known:
            found[route.pool_name] = Sizes(None, bound)
            continue
        found[route.pool_name] = Sizes(capacity, bound, capacity - slots)
    return found


class RouteTable:
    """The routes every request reads, with their deployments, listing and client keys.

    Which route serves a model, its deployments with their breakers and loads, what
    /v1/models lists, client keys, and why a route cannot serve now. State only: the
    request's parts (gateway/path/parts) read it; ``reconfigure`` replaces it.
    """

    def __init__(self, config: GatewayConfig, metrics: GatewayMetrics, *, clock: Clock,
                 ledger: Ledger, local_share: float = 1.0) -> None:
        self.metrics, self._clock = metrics, clock
        self.ledger, self._local_share = ledger, local_share
        self.gate: ClientGate | None = None  # with clientKeys: who may call, limits, spend
        self.unrouted = RouteMetrics(metrics, NO_ROUTE)  # requests that found no route
        self._unavailable: dict[str, str] = {}  # route label -> why it cannot serve now
        self._absent: dict[str, str] = {}  # model -> why it is known but not served here
        self._created: dict[str, int] = {}  # model -> when it was first routed (Unix time)
        # (route label, upstream host) -> breaker: one model's failures never cut off
        # another model on the same provider, and each route keeps its own settings.
        self.breakers: dict[tuple[str, str], Breaker] = {}
        # upstream base URL -> its load: a replica's requests in flight whichever route
        # (the model's, an adapter's) sent them
        self.loads: dict[str, Load] = {}
        self._indexes: dict[str, PrefixIndex] = {}  # by route label
        # InferenceObjective names and their priorities (the router watches them)
        self.objectives: dict[str, int] = {}
        self.routes: dict[str, RouteState] = {}
        self.reconfigure(config)

    def reconfigure(self, config: GatewayConfig) -> None:
        """Serve ``config``'s routes from the next request on (requests in flight finish).

        A route whose upstream host is unchanged keeps its circuit breaker's state (with the
        new settings); limits start afresh.
        """
        old, old_loads = self.breakers, self.loads
        old_calls = {(state.route.label, d.label): d.calls
                     for state in self.routes.values() for d in state.deployments}
        indexes: dict[str, PrefixIndex] = {}
        breakers: dict[tuple[str, str], Breaker] = {}
        loads: dict[str, Load] = {}
        routes: dict[str, RouteState] = {}
        for route in config.routes:
            cb = route.circuit_breaker
            deployments = []
            for upstream in route.deployments:
                where = (route.label, upstream.label)
                breaker = breakers[where] = old.get(where) or Breaker(
                    cb.failure_threshold, cb.open_seconds, self._clock)
                breaker.threshold, breaker.open_seconds = cb.failure_threshold, cb.open_seconds
                base = upstream.base_url.rstrip("/")
                load = loads[base] = loads.get(base) or old_loads.get(base) or Load()
                deployments.append(Deployment(
                    upstream, base,
                    KeySource(upstream.api_key) if upstream.api_key else None, breaker,
                    NATIVE.get(upstream.api), load, old_calls.get(where) or RouteCalls()))
                self.metrics.circuit.labels(*where).set(int(breaker.state))
            limit = route.rate_limit
            state = RouteState(
                route=route, deployments=deployments,
                metrics=RouteMetrics(self.metrics, route.label),
                limits=limits(f"route {route.label!r}", f"route:{route.label}",
                              rpm=limit.requests_per_minute, tpm=limit.tokens_per_minute,
                              clock=self._clock, share=self._local_share),
                index=indexes.setdefault(route.label, self._indexes.get(route.label)
                                         or PrefixIndex()),
            )
            for name in [*route.models, *route.aliases]:
                routes[name] = state
        for gone in set(old) - set(breakers):
            self.metrics.circuit.remove(*gone)
        keys = config.client_keys
        if keys is None:
            self.gate = None
        elif self.gate is None or str(self.gate.source.path) != keys.file:
            self.gate = ClientGate(KeyringSource(Path(keys.file)), self.ledger, self.metrics,
                                   self._clock, local_share=self._local_share)
        self.config, self.routes = config, routes
        self.breakers, self.loads, self._indexes = breakers, loads, indexes
        now = int(time.time())
        self._created = {name: self._created.get(name, now) for name in routes}
        states = {id(state): state for state in routes.values()}.values()  # config order
        self._listing = [([self._entry(n, state) for n in state.route.models],
                          [self._entry(n, state) for n in state.route.aliases])
                         for state in states]
        self.models_body = json.dumps({"object": "list",
                                       "data": self.listed(None)}).encode()

    def states(self) -> list[RouteState]:
        """Each route once, in the config's order."""
        return list({id(s): s for s in self.routes.values()}.values())

    def _entry(self, name: str, state: RouteState) -> dict[str, Any]:
        """A /v1/models entry."""
        return {"id": name, "object": "model", "created": self._created[name],
                "owned_by": state.route.owned_by
                or (urlsplit(state.deployments[0].url_base).netloc if state.deployments
                    else "llmop")}

    def listed(self, client: Client | None) -> list[dict[str, Any]]:
        """What /v1/models shows ``client``.

        Each route's models the key may use, else the first alias it may use (a key for
        ``team-a/*`` sees its models by those names).
        """
        if client is None:
            return [e for named, _ in self._listing for e in named]
        out = []
        for named, aliases in self._listing:
            usable = [e for e in named if client.key.may_use(e["id"])]
            out += usable or [e for e in aliases if client.key.may_use(e["id"])][:1]
        return out

    def set_absent(self, reasons: dict[str, str]) -> None:
        """Models known but not served, with why: their requests get a 404 saying so."""
        self._absent = dict(reasons)

    def absent(self, model: str) -> str | None:
        """Why ``model`` is known but not served here (None: it is not known)."""
        return self._absent.get(model)

    def in_flight(self, base_url: str) -> int:
        """Requests sent to the upstream at ``base_url`` and not yet answered in full."""
        load = self.loads.get(base_url.rstrip("/"))
        return load.in_flight if load is not None else 0

    def engine_waiting(self, base_url: str) -> float:
        """The queue the upstream's engine reported at its last scrape (0 before one)."""
        load = self.loads.get(base_url.rstrip("/"))
        return load.waiting if load is not None else 0.0

    def pool_engines(self, pool: str) -> dict[str, Load]:
        """The replicas of flow-control pool ``pool``: base URL -> this gateway's load."""
        return {d.url_base: d.load for state in self.routes.values()
                if state.route.pool_name == pool for d in state.deployments}

    def route_slots(self, label: str) -> tuple[float, int | None] | None:
        """A route's requests at its engines now, and their slots (None: unknown).

        Busy is what this gateway has in flight at each replica, or what the engine says
        it runs where it says more (requests other routers sent). None: no such route.
        """
        state = self.routes.get(label)
        if state is None:
            return None
        slots = [self._slots(d) for d in state.deployments]
        busy = sum(max(float(d.load.in_flight), d.load.running) for d in state.deployments)
        return busy, None if not slots or None in slots else sum(s or 0 for s in slots)

    def route_calls(self, label: str) -> tuple[int, float | None] | None:
        """The route's own calls to its engines: in flight, and seconds since the last ended.

        The seconds are None before the first ended; the whole None where no such route is.
        """
        state = self.routes.get(label)
        if state is None:
            return None
        last = max((d.calls.last_done for d in state.deployments), default=0.0)
        return (sum(d.calls.in_flight for d in state.deployments),
                self._clock() - last if last else None)

    def _slots(self, deployment: Deployment) -> int | None:
        """A replica's slots: its upstream's, else flow control's per replica (None)."""
        return deployment.upstream.slots or self.config.flow_control.per_replica_concurrency

    def pool_slots(self, pool: str) -> dict[str, int | None]:
        """The replicas of ``pool``: base URL -> its slots (None: unknown)."""
        return {d.url_base: self._slots(d) for state in self.routes.values()
                if state.route.pool_name == pool for d in state.deployments}

    def engine_load(self, base_url: str, *, waiting: float, running: float,
                    kv_usage: float) -> None:
        """What an upstream's engine reports of its queue (scraped by the router)."""
        load = self.loads.get(base_url.rstrip("/"))
        if load is not None:
            load.waiting, load.running, load.kv_usage = waiting, running, kv_usage

    def set_unavailable(self, label: str, reason: str | None) -> None:
        """Answer the route's requests with 503 and ``reason`` until called with None.

        For an upstream known to be down (a local model loading or restarting): clients get
        a message and a Retry-After instead of connection errors and retries.
        """
        if reason is None:
            self._unavailable.pop(label, None)
        else:
            self._unavailable[label] = reason

    def unavailable_error(self, state: RouteState, model: str | None = None
                           ) -> web.Response | None:
        """The 503 for a route marked unavailable (set_unavailable), or None."""
        reason = self._unavailable.get(state.route.label)
        if reason is None:
            return None
        return error_response(503, f"{model or state.route.models[0]!r} cannot serve right "
                              f"now: {reason}", "server_error", "model_unavailable",
                              headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
