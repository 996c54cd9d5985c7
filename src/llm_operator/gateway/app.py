"""The gateway composed: OpenAI-compatible endpoints, each request through its route's path.

This module composes the subpackages: the request path from its parts (path/parts, run by
path/request_path.py, in the order ``Gateway.path`` lists them; docs/gateway.md has the
table), the endpoints beside it (server/), and the aiohttp application's start and stop.
The routes every part reads are routing/routes.py's RouteTable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llm_operator.access.spend import Ledger, MemoryLedger
from llm_operator.batch.runner import BatchRunner
from llm_operator.batch.store import Store
from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.flow.engine_watch import EngineWatch, Sweep
from llm_operator.gateway.flow.saturation import Saturation
from llm_operator.gateway.inbound.incoming import Incoming
from llm_operator.gateway.path.answers import as_anthropic_error
from llm_operator.gateway.path.judging import RouteJudges
from llm_operator.gateway.path.parts.body import ReadBody
from llm_operator.gateway.path.parts.classify import Classify
from llm_operator.gateway.path.parts.forward import Forward
from llm_operator.gateway.path.parts.guard import Guard
from llm_operator.gateway.path.parts.hold import Hold, Reroute
from llm_operator.gateway.path.parts.identify import Identify
from llm_operator.gateway.path.parts.limit import Limit
from llm_operator.gateway.path.parts.owner import ToOwner
from llm_operator.gateway.path.parts.relay import Relay
from llm_operator.gateway.path.parts.resolve import Resolve
from llm_operator.gateway.path.parts.shape import Shape
from llm_operator.gateway.path.parts.slot import Slot
from llm_operator.gateway.path.parts.wake import Wake
from llm_operator.gateway.path.request_path import Check, RequestPath
from llm_operator.gateway.routing.client_keys import ClientGate
from llm_operator.gateway.routing.holding import Holds
from llm_operator.gateway.routing.llama_router_control import LlamaRouterControl
from llm_operator.gateway.routing.looks import Looks
from llm_operator.gateway.routing.owners import Owners
from llm_operator.gateway.routing.picking import Load
from llm_operator.gateway.routing.routes import Clock, RouteState, RouteTable, Sleep, pools
from llm_operator.gateway.routing.sleepers import HttpControl, Sleepers, engine_key
from llm_operator.gateway.routing.sleepers import member as sleep_member
from llm_operator.gateway.server.batches import BatchApi, open_store, own_address, runner_settings
from llm_operator.gateway.server.endpoints import (
    MESSAGES_PATH,
    MODERATIONS_PATH,
    PROXIED_PATHS,
    answering_errors,
    finish_routes,
)
from llm_operator.gateway.server.http import SERVED_PATHS, ServedPaths, served
from llm_operator.gateway.server.moderations import Moderations
from llm_operator.gateway.server.openapi import description
from llm_operator.gateway.server.status import export_states, readiness
from llm_operator.gateway.settings.config import (
    ConfigError,
    GatewayConfig,
    Route,
    check_route_set,
)
from llm_operator.gateway.telemetry.metrics import FlowMetrics, GatewayMetrics
from llm_operator.gateway.telemetry.tracing import Traces
from llm_operator.gateway.upstream.proxies import proxy_settings
from llm_operator.guardrails.runner import Guarding
from llm_operator.span_export import SpanShipper
from llm_operator.telemetry import trace_target

if TYPE_CHECKING:  # redis with it: imported where Redis is configured
    from llm_operator.access.shared import SharedLimits

log = logging.getLogger("llm_operator.gateway")
# what a reconfigure cannot change: the server, Redis, tracing and the Batch API are
# made once, when the gateway starts
READ_AT_START = ("listen", "redis", "tracing", "max_request_bytes", "batch")

class Gateway:
    """The gateway: its route table, flow control and holds, and the request path's parts.

    ``app()`` composes the parts (gateway/path/parts) in the order a request meets them; the
    other methods are what the local runtime and the router change as models come and go.
    """

    def __init__(self, config: GatewayConfig, *, clock: Clock = time.monotonic,
                 sleep: Sleep = asyncio.sleep, jitter: Callable[[], float] = random.random,
                 ledger: Ledger | None = None, pick: Callable[[], float] = random.random,
                 component: str = "gateway", owners: Owners | None = None) -> None:
        self.metrics = GatewayMetrics()
        # the router's replicas: which of them holds each model's queue (None: only this)
        self.owners = owners
        target = trace_target(config.tracing, component)  # read once, at start
        self.traces = None if target is None else Traces(target.sampler, SpanShipper(
            target.endpoint, target.service, "llm_operator.gateway"))
        self._clock, self._sleep, self._jitter, self._pick = clock, sleep, jitter, pick
        self.shared = _shared(config, self.metrics, clock)
        self._flush_spend: Callable[[], Awaitable[None]] | None = None
        if ledger is None and self.shared is not None and config.redis is not None:
            from llm_operator.access.shared import RedisLedger  # noqa: PLC0415  (as _shared)
            spend = RedisLedger(self.shared, config.redis.spend_flush_seconds)
            ledger, self._flush_spend = spend, spend.close
        self.ledger: Ledger = ledger or MemoryLedger()
        self.table = RouteTable(config, self.metrics, clock=clock, ledger=self.ledger,
                                local_share=config.redis.local_share if config.redis else 1.0)
        self.proxies = proxy_settings(os.environ)  # egress proxies, read once (ProxyError)
        self.before_scrape: list[Callable[[], None]] = []  # gauges set when /metrics is read
        self.holds = Holds(config.max_held_per_route, config.max_held,
                           on_change=lambda label, n: self.metrics.held.labels(label).set(n))
        self.flow = Flow(config.flow_control, clock, FlowMetrics(self.metrics))
        self.saturation = Saturation(config.flow_control)  # each replica's engine queue
        self.looks = Looks(self.table, self.flow, self.saturation, self.metrics)
        self._watch: asyncio.Task[None] | None = None
        self.batch_runner: BatchRunner | None = None  # with the Batch API (enable_batches)
        self.batch_api: BatchApi | None = None
        self._batch_task: asyncio.Task[None] | None = None
        self._batch_autostart = True
        self._path: RequestPath | None = None  # the app's, opened and closed with it
        # engines that take turns on one accelerator (vLLM's sleep mode)
        self.sleep_control = HttpControl()
        self.router_control = LlamaRouterControl()  # a pool's members, against thrash
        self.sleepers = Sleepers(self.sleep_control, lambda group, action, outcome:
                                 self.metrics.sleep_changes.labels(group, action,
                                                                   outcome).inc(),
                                 clock=clock, sleep=sleep,
                                 others={"llama-router": self.router_control})
        self.judges = RouteJudges(self.table, self.flow, clock)  # guard models, as routes
        self.guarding = Guarding(self.metrics, judge_client=self.judges)  # guardrails
        self.reconfigure(config)

    # --- what changes while it serves ---------------------------------------------------

    @property
    def config(self) -> GatewayConfig:
        return self.table.config

    @property
    def routes(self) -> dict[str, RouteState]:
        return self.table.routes

    @property
    def gate(self) -> ClientGate | None:
        return self.table.gate

    @property
    def objectives(self) -> dict[str, int]:
        """InferenceObjective names and their priorities (the router watches them)."""
        return self.table.objectives

    @objectives.setter
    def objectives(self, found: dict[str, int]) -> None:
        self.table.objectives = found

    def reconfigure(self, config: GatewayConfig) -> None:
        """Serve ``config``'s routes from the next request on (requests in flight finish).

        A route whose upstream host is unchanged keeps its circuit breaker's state (with the
        new settings); limits start afresh. The local runtime calls this when a model YAML
        is added, edited or removed, the router on every change it watches. Settings read
        only at start (``READ_AT_START``) keep their first value: a change to one is logged,
        saying to restart.
        """
        before = self.table.config
        kept = {name: getattr(before, name) for name in READ_AT_START
                if getattr(before, name) != getattr(config, name)}
        for name in kept:
            log.warning("gateway config: %s changed, but the gateway reads it only at start: "
                        "restart it to apply the change", GatewayConfig.model_fields[name].alias
                        or name)
        if kept:
            config = config.model_copy(update=kept)
        self.table.reconfigure(config)
        self.sleepers.configure(m for r in config.routes if (m := sleep_member(r)))
        self.guarding.prepare(any(r.guardrails for r in config.routes))
        self.saturation.configure(config.flow_control, self.table.loads)
        self.flow.configure(config.flow_control,
                            pools(config, self.saturation.headroom))
        self.holds.per_route, self.holds.total = config.max_held_per_route, config.max_held
        routes = self.table.routes
        for label in list(self.holds.held):  # replicas came, or the route went: look again
            found = next((s for s in routes.values() if s.route.label == label), None)
            if found is None or found.deployments:
                self.holds.release(label)

    def set_routes(self, routes: Sequence[Route]) -> None:
        """Serve ``routes`` with the settings the gateway already has.

        This is how the router and `llmop up` change what it serves; ``reconfigure`` takes
        a whole config, as a file gives it.

        ConfigError when two routes claim one name or a sleep group disagrees with itself.
        """
        try:
            check_route_set(routes)
        except ValueError as exc:
            raise ConfigError(f"routes: {exc}") from None
        self.reconfigure(self.config.model_copy(update={"routes": list(routes)}))

    def set_absent(self, reasons: dict[str, str]) -> None:
        """Models known but not served, with why: their requests get a 404 saying so."""
        self.table.set_absent(reasons)

    def set_unavailable(self, label: str, reason: str | None) -> None:
        """Answer the route's requests with 503 and ``reason`` until called with None."""
        self.table.set_unavailable(label, reason)

    def in_flight(self, base_url: str) -> int:
        return self.table.in_flight(base_url)

    def engine_waiting(self, base_url: str) -> float:
        return self.table.engine_waiting(base_url)

    def engine_load(self, base_url: str, *, waiting: float, running: float,
                    kv_usage: float) -> None:
        self.table.engine_load(base_url, waiting=waiting, running=running, kv_usage=kv_usage)

    def route_slots(self, label: str) -> tuple[float, int | None] | None:
        return self.table.route_slots(label)

    def route_calls(self, label: str) -> tuple[int, float | None] | None:
        return self.table.route_calls(label)

    def route_line(self, label: str) -> tuple[int, int]:
        """(requests waiting for the route's engine to get a place, its place in line)."""
        state = self.table.routes.get(label)
        return (0, 0) if state is None else self.sleepers.line(state.route)

    def pool_engines(self, pool: str) -> dict[str, Load]:
        return self.table.pool_engines(pool)

    # --- the Files and Batch APIs -------------------------------------------------------

    def serve_batches(self, base_url: Callable[[], str], *, store: Store | None = None,
                      autostart: bool = True, on_change: Callable[[], None] = lambda: None
                      ) -> None:
        """Serve OpenAI's Files and Batch APIs as the config's ``batch`` section says.

        Nothing happens unless ``batch.enabled``. Files and batches are kept in the
        configured store (``batch.path``, else Redis), or in ``store`` where one is given.
        Batches run through this gateway at ``base_url()`` (its own address, asked when a
        request is sent). Call before ``app()``: the routes are added there, and the
        runner runs while the app does (``autostart``; else the caller runs it, as the
        router does while it holds the batch Lease). ``on_change`` is called when a batch
        changes (`llmop up` shows them).
        """
        settings = self.config.batch
        if not settings.enabled:
            return
        counted = self.metrics.batch_requests
        runner = self.batch_runner = BatchRunner(
            store or open_store(settings, self.config.redis), base_url,
            served=lambda model: model in self.table.routes,
            has_replica=self._has_replica, settings=runner_settings(settings),
            counted=lambda outcome: counted.labels(outcome).inc(), on_change=on_change)
        self.batch_api = BatchApi(runner, self._owner)
        self.before_scrape.append(self._export_batches)
        self._batch_autostart = autostart

    async def batches_of(self, owner: str) -> list[dict[str, Any]]:
        """A client key's batches as GET /v1/batches lists them (none: batches are off)."""
        return [] if self.batch_api is None else await self.batch_api.listing(owner)

    def _export_batches(self) -> None:
        if self.batch_runner is not None:
            self.metrics.batches_unfinished.set(self.batch_runner.unfinished)
            self.metrics.batch_requests_left.set(self.batch_runner.left())

    def _has_replica(self, model: str) -> bool:
        state = self.table.routes.get(model)
        return state is None or bool(state.deployments)  # an unknown model: its error

    def _owner(self, request: web.Request) -> str | web.Response:
        """Whose files and batches a request sees: its key's id ("" without keys), or a 401."""
        gate = self.table.gate
        if gate is None:
            return ""
        client = gate.identify(request)
        return client if isinstance(client, web.Response) else client.key.id

    # --- application -------------------------------------------------------------------

    def path(self) -> RequestPath:
        """The request path: its parts in the order a request meets them."""
        table, clock = self.table, self._clock
        resolve = Resolve(table)
        forward = Forward(
            table, Relay(table, clock), self.proxies, clock=clock, sleep=self._sleep,
            jitter=self._jitter, pick=self._pick)
        runner_token = None if self.batch_runner is None else self.batch_runner.token
        owner: tuple[Check, ...] = ()
        if self.owners is not None:  # the replica holding the model's queue serves it
            owner = (ToOwner(self.owners, self.flow, self.metrics, clock=clock),)
        return RequestPath(
            table, self.traces, clock,
            checks=(Identify(table, runner_token),  # who: a client key, or a batch's owner
                    Classify(table),  # flow control's band and fairness ID
                    ReadBody(table),  # the JSON and its model
                    resolve,  # the route, for this client; can it serve now
                    *owner,  # on another router replica, where its queue is: sent there
                    Limit(table, self.shared),  # budget, rate limits: before any work
                    Guard(self.guarding),  # its guardrails on the request (and the answer)
                    Hold(table, self.holds, resolve, clock)),  # a replica, from zero
            shape=Shape(),  # how each upstream is asked
            slot=Slot(self.flow, clock),  # a slot of the model's replicas
            wake=Wake(self.sleepers),  # its engine awake, where engines take turns
            forward=forward,  # attempts, failover, retries; Relay answers
            reroute=Reroute(table, self.holds, clock))  # replicas gone: wait for others

    def app(self, more: Callable[[web.UrlDispatcher], None] | None = None
            ) -> web.Application:
        """The aiohttp application; ``more`` adds the caller's own routes (the router's)."""
        app = web.Application(client_max_size=self.config.max_request_bytes)
        path = self._path = self.path()
        for route in PROXIED_PATHS:
            app.router.add_post(route, path.handle)

        async def messages(request: Incoming) -> web.StreamResponse:
            """POST /v1/messages: Anthropic's Messages API in front of any routed model."""
            response = await path.handle(request, anthropic=True)
            if isinstance(response, web.Response) and response.status >= 400:
                return as_anthropic_error(response)
            return response

        moderations = Moderations(
            (Identify(self.table, None), Classify(self.table), ReadBody(self.table),
             Resolve(self.table)),
            self.guarding, self._clock, path.handle,
            limit=Limit(self.table, self.shared),  # a check costs like a request
            slot=Slot(self.flow, self._clock)).handle  # and waits its turn like one
        app.router.add_post(MESSAGES_PATH, messages)
        app.router.add_post(MODERATIONS_PATH, moderations)
        # the same handlers, served by the gateway's own server where it listens (server/http.py)
        app[SERVED_PATHS] = ServedPaths({**dict.fromkeys(PROXIED_PATHS, path.handle),
                                       MESSAGES_PATH: messages, MODERATIONS_PATH: moderations},
                                      self.config.max_request_bytes)
        app.router.add_get("/v1/models", answering_errors(self.models))
        app.router.add_get("/models", answering_errors(self.engines))
        app.router.add_get("/health", answering_errors(self.health))
        app.router.add_get("/ready", answering_errors(self.ready))
        app.router.add_get("/metrics", answering_errors(self.prometheus))
        app.router.add_get("/openapi.json", answering_errors(self.openapi))
        if self.batch_api is not None:
            self.batch_api.add_routes(app.router, answering_errors)
        if more is not None:
            more(app.router)
        finish_routes(app.router)
        app.on_startup.append(self._open)
        app.on_shutdown.append(self._stop_batches)
        app.on_cleanup.append(self._close)
        return app

    def start_batches(self) -> None:
        """Run the batch runner from now until the app stops (once; ``autostart`` False).

        ``llmop up`` starts it after its first scan: a batch resumed before the gateway
        knew its model would have had each request answered 404.
        """
        if self.batch_runner is not None and self._batch_task is None:
            self._batch_task = asyncio.create_task(self.batch_runner.run())

    async def _open(self, _: web.Application) -> None:
        if self._batch_autostart:
            self.start_batches()
        if self.looks.wanted:  # the engines of busy models (all, on the router): one loop
            looks = self.looks
            sweep = None if looks.sweep_seconds is None else \
                Sweep(looks.all_engines, looks.loaded, looks.sweep_seconds)
            self._watch = asyncio.create_task(EngineWatch(
                looks.pools, looks.engines, looks.looked, looks.every, sweep).run())
        if self._path is not None:
            self._path.open()
            self.judges.http = self._path.upstream_client  # guard models: the same client
        if (proxied := self.proxies.describe()) is not None:
            log.info("egress proxies: %s", proxied)

    async def _stop_batches(self, _: web.Application) -> None:
        """Before the server waits for its requests: the runner's are given up."""
        if self._batch_task is not None:
            self._batch_task.cancel()  # what it had in flight is sent again after a restart
            with contextlib.suppress(asyncio.CancelledError):
                await self._batch_task

    async def _close(self, _: web.Application) -> None:
        self.guarding.close()
        await self.sleep_control.close()
        await self.router_control.close()
        self.judges.http = None
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
        if self._path is not None:
            await self._path.close()
        if self._flush_spend is not None:
            await self._flush_spend()  # what was spent since the last flush
        if self.shared is not None:
            await self.shared.client.aclose()
        if self.traces is not None:
            await self.traces.close()  # the spans still batched

    # --- small endpoints ---------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        """Every model, or with client keys the ones the caller's key may use."""
        gate = self.table.gate
        if gate is None:
            return web.Response(body=self.table.models_body, content_type="application/json")
        client = gate.identify(request)
        if isinstance(client, web.Response):
            return client
        return web.json_response({"object": "list", "data": self.table.listed(client)})

    async def engines(self, _: web.Request) -> web.Response:
        """Which engines taking turns are awake: llama-server's router's ``GET /models``.

        The operator reads a pool's members' Loaded condition from it, whichever engine
        serves the pool. Empty where no route has a sleep group.
        """
        return web.json_response(await self.sleepers.report(
            (r.models[0], r.sleep.group, engine_key(r))
            for r in self.config.routes if r.sleep is not None))

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def openapi(self, _: web.Request) -> web.Response:
        """The gateway's OpenAPI description (gateway/server/openapi.py)."""
        return web.json_response(description(batches=self.batch_api is not None))

    async def ready(self, _: web.Request) -> web.Response:
        return readiness(self.table)

    async def prometheus(self, _: web.Request) -> web.Response:
        export_states(self.table, self.metrics, self.sleepers)
        for hook in self.before_scrape:
            hook()
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})


def _shared(config: GatewayConfig, metrics: GatewayMetrics, clock: Clock
            ) -> SharedLimits | None:
    """Limits in Redis when configured (its client connects on first use).

    redis is imported here, not by every gateway: ~0.2 s of each start without it.
    """
    if config.redis is None:
        return None
    from llm_operator.access.shared import SharedLimits, redis_client  # noqa: PLC0415
    settings = config.redis
    client = redis_client(settings.url, settings.password())
    metrics.shared_up.set(1)
    return SharedLimits(client, settings.key_prefix, clock=clock,
                        on_state=lambda up: metrics.shared_up.set(int(up)))


async def serve(config: GatewayConfig, host: str | None = None, port: int | None = None,
                ready: asyncio.Event | None = None) -> None:
    """Run the gateway until cancelled. Client disconnects cancel their upstream request."""
    gateway = Gateway(config)
    gateway.serve_batches(lambda: own_address(
        host or config.listen.host, config.listen.port if port is None else port))
    where = host or config.listen.host
    at = config.listen.port if port is None else port
    async with served(gateway.app(), config.listen.drain_seconds) as listen:
        await listen(where, at)
        log.info("gateway listening on %s:%s with %d route(s)", where, at, len(config.routes))
        if ready is not None:
            ready.set()
        await asyncio.Event().wait()


def run(config: GatewayConfig, host: str | None = None, port: int | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain: in-flight requests finish or are cancelled.

    Requests still running ``listen.drainSeconds`` after the signal are cancelled, whatever
    they wait on (an upstream, a guard): the process ends within that deadline.
    """

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(config, host, port)

    asyncio.run(main())
