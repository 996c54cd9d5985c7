"""The gateway's HTTP server: OpenAI-compatible endpoints proxied to each route's upstream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.limits import Limits, Reservation, admit, limits, retry_after_header
from llm_operator.access.shared import RedisLedger, SharedLimits, redis_client
from llm_operator.access.spend import Ledger, MemoryLedger
from llm_operator.gateway.breaker import Breaker, State
from llm_operator.gateway.clients import Client, ClientGate
from llm_operator.gateway.config import GatewayConfig, Route, Upstream
from llm_operator.gateway.errors import Refusal, error_response
from llm_operator.gateway.holding import Holds
from llm_operator.gateway.http1 import Client as UpstreamClient
from llm_operator.gateway.http1 import Response as UpstreamResponse
from llm_operator.gateway.http1 import UpstreamError
from llm_operator.gateway.inbound.messages import (
    MessagesError,
    StreamTranslator,
    error_body,
    from_openai,
    to_openai,
)
from llm_operator.gateway.keys import KeySource, KeyUnavailable
from llm_operator.gateway.metrics import NO_ROUTE, GatewayMetrics, RouteMetrics
from llm_operator.gateway.picking import (
    Load,
    PrefixIndex,
    least_loaded,
    prefix_cache_order,
    prefix_order,
    prefix_text,
)
from llm_operator.gateway.proxies import proxy_settings
from llm_operator.gateway.sse import (
    split_events,
    sse_data,
    usage_from_body,
    usage_from_sse,
    usage_only,
)
from llm_operator.gateway.upstreams import NATIVE, NativeApi, Untranslatable
from llm_operator.gateway.upstreams.anthropic import VERSION as ANTHROPIC_VERSION
from llm_operator.gateway.upstreams.shapes import error_body as openai_error_body

log = logging.getLogger("llm_operator.gateway")

PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
RETRYABLE = frozenset({429, 502, 503, 504, 529})  # 529: Anthropic overloaded
PASSED_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms",
                  "retry-after")
USAGE_TAIL_BYTES = 16384
UNAVAILABLE_RETRY_AFTER = "5"
CLIENT_CLOSED = 499  # nginx's status for a client that closed the request (metrics only)

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


STREAM_STARTED = web.RequestKey("stream_started", bool)
MESSAGES_PATH = "/v1/messages"  # Anthropic-shaped clients, translated for any model
ENDPOINTS = ", ".join(f"POST {p}" for p in (*PROXIED_PATHS, MESSAGES_PATH)) + ", GET /v1/models"
ANTHROPIC = web.RequestKey("anthropic", bool)  # the request came to /v1/messages


@web.middleware
async def openai_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[
        web.StreamResponse]]) -> web.StreamResponse:
    """Every error in the OpenAI shape: unknown paths, wrong methods, the gateway's own bugs."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(405, f"{request.method} is not allowed on {request.path}; use "
                              f"{', '.join(sorted(exc.allowed_methods))}",
                              "invalid_request_error", "method_not_allowed",
                              headers={"Allow": ", ".join(sorted(exc.allowed_methods))})
    except web.HTTPNotFound:
        return error_response(404, f"no endpoint {request.method} {request.path} here; the "
                              f"gateway serves {ENDPOINTS}", "invalid_request_error",
                              "unknown_endpoint")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason, "invalid_request_error")
    except Exception:
        if request.get(STREAM_STARTED):
            raise  # the answer is under way: aiohttp cuts the connection, the client sees it
        log.exception("internal error serving %s %s", request.method, request.path)
        return error_response(500, "the gateway failed on this request (see its log)",
                              "server_error", "internal_error")


@dataclass(frozen=True)
class Outbound:
    """What goes to one deployment: where, the body, and the parameters left out."""

    url: str
    body: bytes
    dropped: tuple[str, ...] = ()


CHAT_PATH = "/chat/completions"  # the one path a native (translated) upstream serves


@dataclass
class Deployment:
    """One upstream of a route, with its key and its circuit breaker."""

    upstream: Upstream
    url_base: str
    key: KeySource | None
    breaker: Breaker
    native: NativeApi | None = None  # a provider's own API, spoken by translation
    load: Load = field(default_factory=Load)  # kept across reconfigures, like the breaker

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


ROUTE_KEY = web.RequestKey("route", RouteState)  # the route a request resolved to
CLIENT_KEY = web.RequestKey("client", Client)  # the client key it came with


USAGE_OPTION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


def _asks_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


def _as_anthropic_error(response: web.Response) -> web.Response:
    """An error answer re-shaped as Anthropic's, status and headers kept."""
    message = f"HTTP {response.status}"
    try:
        decoded = json.loads(response.body) if isinstance(response.body, bytes) else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        error = decoded.get("error")
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
        elif isinstance(error, str):
            message = error
    kind = ANTHROPIC_ERRORS.get(response.status, "api_error")
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in {"content-type", "content-length"}}
    return web.json_response(error_body(kind, message), status=response.status,
                             headers=headers)


class Gateway:
    """Routes, limits and metrics behind an aiohttp application."""

    def __init__(self, config: GatewayConfig, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep, jitter: Callable[[], float] = random.random,
                 ledger: Ledger | None = None,
                 pick: Callable[[], float] = random.random) -> None:
        self.metrics = GatewayMetrics()
        self._clock, self._sleep, self._jitter = clock, sleep, jitter
        self._pick = pick  # draws the first deployment of each request, by weight
        self.shared = self._shared(config)
        self._local_share = config.redis.local_share if config.redis else 1.0
        self.ledger: Ledger = ledger or (
            RedisLedger(self.shared, config.redis.spend_flush_seconds)
            if self.shared and config.redis else MemoryLedger())
        self.gate: ClientGate | None = None  # with clientKeys: who may call, limits, spend
        self._http: UpstreamClient | None = None
        self.proxies = proxy_settings(os.environ)  # egress proxies, read once (ProxyError)
        self._unrouted = RouteMetrics(self.metrics, NO_ROUTE)
        self._unavailable: dict[str, str] = {}  # route label -> why it cannot serve now
        self._absent: dict[str, str] = {}  # model -> why it is known but not served here
        self._created: dict[str, int] = {}  # model -> when it was first routed (Unix time)
        # (route label, upstream host) -> breaker: one model's failures never cut off
        # another model on the same provider, and each route keeps its own settings.
        self._breakers: dict[tuple[str, str], Breaker] = {}
        # upstream base URL -> its load: a replica's requests in flight whichever route
        # (the model's, an adapter's) sent them
        self._loads: dict[str, Load] = {}
        self._indexes: dict[str, PrefixIndex] = {}  # by route label
        self.before_scrape: list[Callable[[], None]] = []  # gauges set when /metrics is read
        self.holds = Holds(config.max_held_per_route, config.max_held,
                           on_change=lambda label, n: self.metrics.held.labels(label).set(n))
        self.reconfigure(config)

    def _shared(self, config: GatewayConfig) -> SharedLimits | None:
        """Limits in Redis when configured (its client connects on first use)."""
        if config.redis is None:
            return None
        settings = config.redis
        client = redis_client(settings.url, settings.password())
        self.metrics.shared_up.set(1)
        return SharedLimits(client, settings.key_prefix, clock=self._clock,
                            on_state=lambda up: self.metrics.shared_up.set(int(up)))

    def reconfigure(self, config: GatewayConfig) -> None:
        """Serve ``config``'s routes from the next request on (requests in flight finish).

        A route whose upstream host is unchanged keeps its circuit breaker's state (with the
        new settings); limits start afresh. The local runtime calls this when a model YAML
        is added, edited or removed.
        """
        old, old_loads = self._breakers, self._loads
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
                    NATIVE.get(upstream.api), load))
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
        self._breakers, self._loads, self._indexes = breakers, loads, indexes
        self.holds.per_route, self.holds.total = config.max_held_per_route, config.max_held
        for label in list(self.holds.held):  # replicas came, or the route went: look again
            found = next((s for s in routes.values() if s.route.label == label), None)
            if found is None or found.deployments:
                self.holds.release(label)
        now = int(time.time())
        self._created = {name: self._created.get(name, now) for name in routes}
        states = {id(state): state for state in routes.values()}.values()  # config order
        self._listing = [([self._entry(n, state) for n in state.route.models],
                          [self._entry(n, state) for n in state.route.aliases])
                         for state in states]
        self._models_body = json.dumps({"object": "list",
                                        "data": self._listed(None)}).encode()

    def _entry(self, name: str, state: RouteState) -> dict[str, Any]:
        """A /v1/models entry."""
        return {"id": name, "object": "model", "created": self._created[name],
                "owned_by": state.route.owned_by
                or (urlsplit(state.deployments[0].url_base).netloc if state.deployments
                    else "llmop")}

    def _listed(self, client: Client | None) -> list[dict[str, Any]]:
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

    def in_flight(self, base_url: str) -> int:
        """Requests sent to the upstream at ``base_url`` and not yet answered in full."""
        load = self._loads.get(base_url.rstrip("/"))
        return load.in_flight if load is not None else 0

    def engine_load(self, base_url: str, *, waiting: float, running: float,
                    kv_usage: float) -> None:
        """What an upstream's engine reports of its queue (scraped by the router)."""
        load = self._loads.get(base_url.rstrip("/"))
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

    # --- application -------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes,
                              middlewares=[openai_errors])
        for path in PROXIED_PATHS:
            app.router.add_post(path, self.proxy)
        app.router.add_post(MESSAGES_PATH, self.messages)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/metrics", self.prometheus)
        app.on_startup.append(self._open)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _: web.Application) -> None:
        # No cookies are kept: a cookie one client's call earned (a provider's __cf_bm) must
        # not ride on every later client's calls.
        self._http = UpstreamClient(keepalive_seconds=60, proxies=self.proxies)
        if (proxied := self.proxies.describe()) is not None:
            log.info("egress proxies: %s", proxied)

    async def _close(self, _: web.Application) -> None:
        if self._http is not None:
            await self._http.close()
        if isinstance(self.ledger, RedisLedger):
            await self.ledger.close()  # what was spent since the last flush
        if self.shared is not None:
            await self.shared.client.aclose()

    # --- small endpoints ---------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        """Every model, or with client keys the ones the caller's key may use."""
        if self.gate is None:
            return web.Response(body=self._models_body, content_type="application/json")
        try:
            client = self.gate.identify(request)
        except Refusal as refused:
            return refused.response
        return web.json_response({"object": "list", "data": self._listed(client)})

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, _: web.Request) -> web.Response:
        problems = []
        for state in {id(s): s for s in self.routes.values()}.values():
            for deployment in state.deployments:
                if deployment.key is not None:
                    try:
                        deployment.key.get()
                    except KeyUnavailable as exc:
                        where = state.route.label if len(state.deployments) == 1 else \
                            f"{state.route.label} upstream {deployment.label}"
                        problems.append(f"route {where}: {exc}")
        if problems:
            return web.json_response({"status": "not ready", "problems": problems}, status=503)
        ready: dict[str, Any] = {"status": "ready", "routes": len(self.config.routes)}
        if self.gate is not None:
            self.gate.source.current()
            ready["clientKeys"] = len(self.gate.source.keyring.keys)
            if self.gate.source.problem:  # serving with the last good keys
                ready["warnings"] = [self.gate.source.problem]
        return web.json_response(ready)

    async def prometheus(self, _: web.Request) -> web.Response:
        for where, breaker in self._breakers.items():
            self.metrics.circuit.labels(*where).set(int(breaker.state))
        self.metrics.in_flight.clear()
        for base, load in self._loads.items():
            self.metrics.in_flight.labels(base).set(load.in_flight)
        for hook in self.before_scrape:
            hook()
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- the proxy ---------------------------------------------------------------------

    async def messages(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/messages: Anthropic's Messages API in front of any routed model.

        The request is translated to an OpenAI chat completion, the answer (plain or
        streamed) back; the gateway's own errors and the upstream's get Anthropic's shape.
        """
        request[ANTHROPIC] = True
        response = await self.proxy(request)
        if isinstance(response, web.Response) and response.status >= 400:
            return _as_anthropic_error(response)
        return response

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        started = self._clock()
        try:
            response, state = await self._proxy(request, started)
        except asyncio.CancelledError:  # the client went away before the answer
            routed = request.get(ROUTE_KEY)
            (routed.metrics if routed else self._unrouted).request(
                CLIENT_CLOSED, self._clock() - started)
            if (client := request.get(CLIENT_KEY)) is not None:
                client.request(CLIENT_CLOSED)
            raise
        status = response.outcome if isinstance(response, _HeldStream) else \
            None if isinstance(response, _Streamed) else response.status
        if status is not None:  # a relayed stream counted itself as it ended
            metrics = state.metrics if state is not None else self._unrouted
            metrics.request(status, self._clock() - started)
            if (client := request.get(CLIENT_KEY)) is not None:
                client.request(status)
        return response

    async def _proxy(self, request: web.Request, started: float
                     ) -> tuple[web.StreamResponse, RouteState | None]:
        try:
            return await self._admit(request, started), request.get(ROUTE_KEY)
        except Refusal as refused:
            return refused.response, request.get(ROUTE_KEY)
        except _HeldEnded as ended:
            return ended.stream, request.get(ROUTE_KEY)

    async def _read_json(self, request: web.Request) -> tuple[bytes, dict[str, Any], str]:
        """The raw body, its JSON and its model; Refusal (400, 413) when unusable."""
        limit = self.config.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise Refusal(self._too_large())
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise Refusal(self._too_large()) from None
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise Refusal(error_response(400, f"request body is not valid JSON: {exc}",
                                         "invalid_request_error", "invalid_json")) from None
        except RecursionError:
            raise Refusal(error_response(400, "request body nests JSON too deeply",
                                         "invalid_request_error", "invalid_json")) from None
        if request.get(ANTHROPIC) and isinstance(body, dict):
            try:
                body = to_openai(body)
            except MessagesError as exc:
                raise Refusal(error_response(400, str(exc), "invalid_request_error")) from None
            raw = json.dumps(body, separators=(",", ":")).encode()
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            raise Refusal(error_response(400, "the request needs a string field 'model'",
                                         "invalid_request_error", "missing_model",
                                         param="model"))
        return raw, body, model

    def _resolve(self, model: str, client: Client | None) -> RouteState:
        """The route serving ``model`` for this client; Refusal (403, 404) otherwise."""
        state = self.routes.get(model)
        if state is not None and client is not None and not client.key.may_use(model):
            assert self.gate is not None
            raise Refusal(self.gate.forbidden(client, model))
        if state is None:
            known = ", ".join(sorted(e["id"] for e in self._listed(client))) or "none"
            why = self._absent.get(model)
            message = f"The model {model!r} is not served: {why}" if why else \
                f"The model {model!r} does not exist here"
            raise Refusal(error_response(404, f"{message}; available models: {known}",
                                         "invalid_request_error", "model_not_found",
                                         param="model"))
        return state

    async def _admit(self, request: web.Request, started: float) -> web.StreamResponse:
        client = None
        if self.gate is not None:  # who is asking, before reading what they ask
            client = request[CLIENT_KEY] = self.gate.identify(request)
        raw, body, model = await self._read_json(request)
        state = request[ROUTE_KEY] = self._resolve(model, client)
        unavailable = self._unavailable_error(state, model)
        if unavailable is not None:
            return unavailable
        held: _HeldStream | None = None
        if not state.deployments:  # no replica yet: wait for one (scale from zero)
            state, held = await self._hold(request, state, model, client,
                                           stream=body.get("stream") is True)
            request[ROUTE_KEY] = state
        if client is not None:
            assert self.gate is not None
            await self.gate.check_budget(client)
        reservation = Reservation()
        refused = await self._rate_limited(state, client, body, reservation)  # sendable
        if refused is not None:
            return refused
        stream = body.get("stream") is True
        # Usage is what limits and cost are counted from: ask for it on every stream, and
        # keep the usage event from clients that did not ask.
        hide_usage = stream and request.path in USAGE_OPTION_PATHS and not _asks_usage(body)
        if hide_usage:
            options = body.get("stream_options")
            body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                      "include_usage": True}
        path = CHAT_PATH if request.get(ANTHROPIC) else request.path.removeprefix("/v1")
        payloads: dict[str, bytes] = {}
        translated: dict[str, Outbound] = {}

        def outbound(deployment: Deployment) -> Outbound:
            """The request for one deployment: the client's bytes unless its model id differs.

            A native API gets a translation (Untranslatable if there is none).
            """
            upstream_model = state.route.upstream_model(deployment.upstream)
            if deployment.native is not None:
                if deployment.label not in translated:
                    translated[deployment.label] = deployment.translate(
                        body, upstream_model, path=path, stream=stream)
                return translated[deployment.label]
            url = f"{deployment.url_base}{path}"
            fields = state.route.set_fields
            if upstream_model == model and not hide_usage and not fields:
                return Outbound(url, raw)
            if upstream_model not in payloads:
                payloads[upstream_model] = json.dumps(
                    {**body, "model": upstream_model, **fields},
                    separators=(",", ":")).encode()
            return Outbound(url, payloads[upstream_model])

        try:
            response = await self._forward(request, state, outbound=outbound, stream=stream,
                                           started=started, client=client,
                                           reservation=reservation, hide_usage=hide_usage,
                                           held=held, body=body)
        finally:
            reservation.settle()  # no usage came back (an error, a cancel): give it back
        if held is not None and response is not held and isinstance(response, web.Response):
            return await held.fail(response)  # the headers went out with the keepalives
        return response

    async def _hold(self, request: web.Request, state: RouteState, model: str,
                    client: Client | None, *, stream: bool
                    ) -> tuple[RouteState, _HeldStream | None]:
        """Wait until the model has a replica, in arrival order; Refusal when it will not.

        A stream gets its 200 and SSE comments (``: waiting for model (…)``) every
        ``keepalive_seconds`` meanwhile, so clients and proxies keep the connection; a
        plain request just waits. At the deadline: 503 with Retry-After and the reason.
        """
        hold = state.route.hold
        if hold is None:
            raise Refusal(error_response(503, f"{model!r} has no upstream to call",
                                         "server_error", "model_unavailable",
                                         headers={"Retry-After": UNAVAILABLE_RETRY_AFTER}))
        label = state.route.label
        refusal = self.holds.refusal(label)
        if refusal is not None:
            raise Refusal(error_response(
                503, f"{model!r} is not ready ({hold.reason or 'no replica yet'}) and "
                f"{refusal}; retry shortly", "server_error", "model_unavailable",
                headers={"Retry-After": UNAVAILABLE_RETRY_AFTER}))
        deadline = self._clock() + hold.seconds
        held: _HeldStream | None = None
        async with self.holds.holding(label):
            while True:
                current = self.routes.get(model)
                if current is None or current.route.label != label:
                    failure = self._resolve_error(model, client)  # deleted while held
                    if held is None:
                        raise Refusal(failure)
                    raise _HeldEnded(await held.fail(failure))
                state, hold = current, current.route.hold or hold
                if state.deployments:
                    return state, held
                left = deadline - self._clock()
                if left <= 0:
                    failure = error_response(
                        503, f"{model!r} did not get a replica within {hold.seconds:g} s: "
                        f"{hold.reason or 'no replica is ready'}", "server_error",
                        "model_unavailable", headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
                    if held is None:
                        raise Refusal(failure)
                    raise _HeldEnded(await held.fail(failure))
                if stream and held is None:
                    held = _HeldStream(headers={"Content-Type": "text/event-stream",
                                                "Cache-Control": "no-cache",
                                                "x-llmop-held": "true"})
                    await held.prepare(request)
                    request[STREAM_STARTED] = True
                if held is not None:
                    await held.write(f": waiting for model ({hold.reason or 'no replica'})"
                                     "\n\n".encode())
                await self.holds.wait(label, min(left, hold.keepalive_seconds))

    def _resolve_error(self, model: str, client: Client | None) -> web.Response:
        try:
            self._resolve(model, client)
        except Refusal as refused:
            return refused.response
        return error_response(503, f"{model!r} moved while it waited; retry", "server_error",
                              "model_unavailable", headers={"Retry-After": "1"})

    def _too_large(self) -> web.Response:
        return error_response(413, f"request body exceeds {self.config.max_request_bytes} "
                              "bytes", "invalid_request_error", "request_too_large")

    async def _rate_limited(self, state: RouteState, client: Client | None,
                            body: dict[str, Any], reservation: Reservation
                            ) -> web.Response | None:
        """None when the request may go (its tokens reserved), else the 429 to answer.

        The route's and the client key's allowances are taken together or not at all.
        """
        parties = [state.limits] if client is None else [state.limits, client.limits]
        refused = await self.shared.admit(parties, body, reservation) if self.shared \
            else admit(parties, body, reservation)
        if refused is None:
            return None
        party, wait = refused
        state.metrics.rate_limited.inc()
        if client is not None and party is client.limits:
            client.refused("rate_limit")
        return error_response(
            429, f"rate limit of {party.name} reached; retry after "
            f"{retry_after_header(wait)}s", "rate_limit_error", "rate_limit_exceeded",
            headers={"Retry-After": retry_after_header(wait)})

    def _unavailable_error(self, state: RouteState, model: str | None = None
                           ) -> web.Response | None:
        """The 503 for a route marked unavailable (set_unavailable), or None."""
        reason = self._unavailable.get(state.route.label)
        if reason is None:
            return None
        return error_response(503, f"{model or state.route.models[0]!r} cannot serve right "
                              f"now: {reason}", "server_error", "model_unavailable",
                              headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})

    def _backoff(self, state: RouteState, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                pass
        policy = state.route.retry
        ceiling = min(policy.backoff_max_seconds,
                      policy.backoff_initial_seconds * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + 0.5 * self._jitter())

    async def _forward(self, request: web.Request, state: RouteState, *,
                       outbound: Callable[[Deployment], Outbound], stream: bool,
                       started: float,
                       client: Client | None, reservation: Reservation, hide_usage: bool,
                       held: _HeldStream | None = None, body: dict[str, Any] | None = None
                       ) -> web.StreamResponse:
        """Try the route's deployments in order (failover), then again after a backoff.

        A deployment whose circuit is open is skipped; a failure (429, 502-504, connection
        error, timeout) moves on to the next deployment at once, and back to the first after
        the backoff, while ``retry.attempts`` and the request's deadline allow. Nothing is
        retried once a stream has started.
        """
        route, label = state.route, state.route.label
        deadline = started + route.timeouts.request_seconds
        order = state.order(self._pick(), body)
        attempt = position = skipped = 0
        while True:
            deployment = order[position % len(order)]
            position += 1
            try:
                sending = outbound(deployment)
            except Untranslatable as exc:
                return error_response(400, f"{exc} (upstream {deployment.label} of "
                                      f"{label!r})", "invalid_request_error",
                                      "unsupported_by_upstream", param=exc.param,
                                      headers={"x-llmop-upstream": deployment.label})
            # A retry re-checks: the upstream may have been marked down meanwhile (a local
            # model process that died as the first attempt went out).
            unavailable = self._unavailable_error(state) if attempt else None
            if unavailable is not None:
                return unavailable
            if not deployment.breaker.allow():
                state.metrics.upstream_error("circuit_open")
                skipped += 1
                if skipped < len(order):
                    continue
                wait = retry_after_header(min(d.breaker.retry_in() for d in order))
                return error_response(503, f"upstream of {label!r} is failing; the gateway "
                                      f"stops calling it for {wait}s", "server_error",
                                      "circuit_open", headers={"Retry-After": wait})
            skipped = 0
            attempt += 1
            tried = {"x-llmop-upstream": deployment.label, "x-llmop-attempts": str(attempt)}
            if sending.dropped:
                tried["x-llmop-dropped-params"] = ",".join(sending.dropped)
            deployment.load.in_flight += 1  # until its answer is relayed in full
            try:
                outcome = await self._attempt(deployment, state, sending.url, sending.body,
                                              stream=stream, deadline=deadline)
                if isinstance(outcome, UpstreamResponse) \
                        and outcome.status not in RETRYABLE:
                    if stream and outcome.status == 200:
                        return await self._relay_stream(
                            request, state, outcome, started, client=client,
                            reservation=reservation, hide_usage=hide_usage, extra=tried,
                            native=deployment.native, prepared=held)
                    return await self._relay(request, state, outcome, client=client,
                                             reservation=reservation, extra=tried,
                                             native=deployment.native)
            finally:
                deployment.load.in_flight -= 1
            failover = len(order) > 1 and position % len(order) != 0
            retry_after = outcome.headers.get("Retry-After") \
                if isinstance(outcome, UpstreamResponse) else None
            delay = 0.0 if failover else self._backoff(state, attempt, retry_after)
            rate_limited = isinstance(outcome, UpstreamResponse) and outcome.status == 429
            may = (attempt < route.retry.attempts and self._clock() + delay < deadline
                   and (len(order) > 1 or deployment.breaker.state is State.CLOSED)
                   and (failover or not rate_limited or route.retry.on_rate_limit))
            if may:
                if isinstance(outcome, UpstreamResponse):
                    outcome.release()
                (state.metrics.failovers if failover else state.metrics.retries).inc()
                if delay:
                    await self._sleep(delay)
                continue
            if isinstance(outcome, UpstreamResponse):
                return await self._relay(request, state, outcome, client=client,
                                         reservation=reservation, extra=tried,
                                         native=deployment.native)
            log.warning("route %s: upstream %s after %d attempts", label, outcome, attempt)
            if outcome == "credentials":
                return error_response(503, f"the gateway has no credentials for {label!r}; "
                                      "its operator must provide the API key", "server_error",
                                      "credentials_unavailable", headers=tried)
            status = 504 if outcome == "timeout" else 502
            return error_response(status, f"upstream of {label!r} did not answer ({outcome}) "
                                  f"after {attempt} attempt(s)", "server_error",
                                  f"upstream_{outcome}", headers=tried)

    async def _attempt(self, deployment: Deployment, state: RouteState, url: str,
                       payload: bytes, *, stream: bool, deadline: float
                       ) -> UpstreamResponse | str:
        """One call to one deployment, its verdict recorded on the deployment's breaker.

        The upstream's response, or why there was none: connect, timeout, credentials.
        """
        assert self._http is not None
        try:
            headers = deployment.auth_headers()
        except KeyUnavailable as exc:
            log.error("route %s upstream %s: %s", state.route.label, deployment.label, exc)
            deployment.breaker.release()
            return "credentials"
        timeouts = state.route.timeouts
        try:
            upstream = await self._http.post(
                url, payload, headers, connect_timeout=timeouts.connect_seconds,
                total=None if stream else deadline - self._clock(),
                read_timeout=timeouts.request_seconds if stream else None)
        except asyncio.CancelledError:  # the client went away: no verdict on the upstream
            deployment.breaker.release()
            raise
        except UpstreamError as exc:
            deployment.breaker.failure()
            state.metrics.upstream_error(exc.reason)
            log.info("route %s upstream %s: %s", state.route.label, deployment.label, exc)
            return exc.reason
        status = upstream.status
        if status >= 500:
            deployment.breaker.failure()
        else:
            deployment.breaker.success()  # a 429 too: alive, only busy
        if status == 429 or status >= 500:
            state.metrics.upstream_error(str(status))
        return upstream

    def _headers_from(self, upstream: UpstreamResponse) -> dict[str, str]:
        out = {k: v for k in PASSED_HEADERS if (v := upstream.headers.get(k)) is not None}
        out.update({k: v for k, v in upstream.headers.items()
                    if k.lower().startswith("x-ratelimit-")})
        return out

    async def _account(self, state: RouteState, client: Client | None, prompt: int,
                       completion: int, reservation: Reservation) -> None:
        if not prompt and not completion:
            return
        reservation.settle(prompt + completion)
        state.metrics.prompt_tokens.inc(prompt)
        state.metrics.completion_tokens.inc(completion)
        usd = 0.0
        if state.route.pricing:
            price = state.route.pricing
            usd = (prompt * price.input_per_million / 1e6
                   + completion * price.output_per_million / 1e6)
            state.metrics.cost.inc(usd)
        if client is not None and self.gate is not None:
            await self.gate.charge(client, usd, prompt, completion)

    async def _relay(self, request: web.Request, state: RouteState,
                     upstream: UpstreamResponse, *, client: Client | None,
                     reservation: Reservation, extra: dict[str, str],
                     native: NativeApi | None) -> web.Response:
        try:
            body = await upstream.read()
        except UpstreamError as exc:  # it began to answer, then failed
            state.metrics.upstream_error(exc.reason)
            log.warning("route %s: upstream %s: %s", state.route.label, extra.get(
                "x-llmop-upstream"), exc)
            return error_response(504 if exc.reason == "timeout" else 502,
                                  f"upstream of {state.route.label!r} failed while it answered "
                                  f"({exc.reason})", "server_error", f"upstream_{exc.reason}",
                                  headers=extra)
        if native is not None:
            body = self._from_native(native, upstream.status, body)
        if upstream.status == 200:
            await self._account(state, client, *usage_from_body(body), reservation)
            if request.get(ANTHROPIC):
                try:
                    answer = json.loads(body)
                except ValueError:
                    answer = None
                if isinstance(answer, dict):
                    message = from_openai(answer, state.route.models[0])
                    return web.json_response(message, headers=extra)
        return web.Response(body=body, status=upstream.status,
                            headers={**self._headers_from(upstream), **extra})

    def _from_native(self, native: NativeApi, status: int, body: bytes) -> bytes:
        """A native answer or error in OpenAI's shape (which the rest of the path reads)."""
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        if status == 200 and isinstance(decoded, dict):
            shaped = native.answer(decoded, int(time.time()))
        elif status == 200:
            shaped = openai_error_body(f"{native.name}: the answer is not a JSON object",
                                       "server_error")
        else:
            shaped = native.error(status, decoded)
        return json.dumps(shaped, separators=(",", ":")).encode()

    async def _relay_stream(self, request: web.Request, state: RouteState,
                            upstream: UpstreamResponse, started: float, *,
                            client: Client | None, reservation: Reservation,
                            hide_usage: bool, extra: dict[str, str],
                            native: NativeApi | None,
                            prepared: web.StreamResponse | None = None) -> web.StreamResponse:
        """Relay as it arrives; with ``hide_usage``, whole events minus the usage-only one.

        A native upstream's events are first translated to OpenAI chunks.
        """
        label = state.route.label
        out = prepared or _Streamed(status=200, headers={**self._headers_from(upstream),
                                                         "Cache-Control": "no-cache", **extra})
        tail = pending = b""
        first = True
        completed = False
        translator = StreamTranslator(state.route.models[0]) if request.get(ANTHROPIC) \
            else None
        adapter = native.stream(int(time.time())) if native is not None else None

        async def relay(chunk: bytes) -> None:
            nonlocal tail, pending
            tail = (tail + chunk)[-USAGE_TAIL_BYTES:]
            send = chunk
            if translator is not None:
                events, pending = split_events(pending + chunk)
                send = b"".join(b"".join(translator.chunk(d)) for e in events
                                if (d := sse_data(e)) is not None)
            elif hide_usage:
                events, pending = split_events(pending + chunk)
                send = b"".join(e for e in events if not usage_only(e))
            if send:
                await out.write(send)

        try:
            if prepared is None:  # a held stream's headers went out with its keepalives
                await out.prepare(request)
            request[STREAM_STARTED] = True
            async for chunk in upstream.chunks():
                if first:
                    state.metrics.ttft.observe(self._clock() - started)
                    first = False
                await relay(adapter.feed(chunk) if adapter is not None else chunk)
            if adapter is not None:
                await relay(adapter.close())
            if translator is not None:
                await out.write(b"".join(translator.finish()))
            elif pending:
                await out.write(pending)
            await out.write_eof()
            completed = True
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            log.info("route %s: client went away mid-stream; upstream request cancelled", label)
        finally:
            if completed:
                upstream.release()
            else:
                upstream.close()  # tear the connection down: the upstream stops generating
            state.metrics.request(200 if completed else CLIENT_CLOSED, self._clock() - started)
            if client is not None:
                client.request(200 if completed else CLIENT_CLOSED)
        if completed:
            await self._account(state, client, *usage_from_sse(tail), reservation)
        return out


class _Streamed(web.StreamResponse):
    """A relayed stream: its metrics are recorded when it ends, not when it starts."""


class _HeldEnded(Exception):
    """A held stream that ended with an error event (its model never came, or went)."""

    def __init__(self, stream: _HeldStream) -> None:
        super().__init__(stream.outcome)
        self.stream = stream


class _HeldStream(_Streamed):
    """A stream answered 200 with keepalives while its model had no replica.

    If no answer comes after all, the error goes into the stream as an OpenAI error
    event; ``outcome`` is then the status the metrics count.
    """

    outcome: int | None = None

    async def fail(self, response: web.Response) -> _HeldStream:
        body = response.body if isinstance(response.body, bytes) else b"{}"
        await self.write(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        await self.write_eof()
        self.outcome = response.status
        return self


async def serve(config: GatewayConfig, host: str | None = None, port: int | None = None,
                ready: asyncio.Event | None = None) -> None:
    """Run the gateway until cancelled. Client disconnects cancel their upstream request."""
    gateway = Gateway(config)
    runner = web.AppRunner(gateway.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host or config.listen.host, config.listen.port
                       if port is None else port)
    await site.start()
    log.info("gateway listening on %s:%s with %d route(s)", host or config.listen.host,
             config.listen.port if port is None else port, len(config.routes))
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(config: GatewayConfig, host: str | None = None, port: int | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain: in-flight requests finish or are cancelled."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(config, host, port)

    asyncio.run(main())
