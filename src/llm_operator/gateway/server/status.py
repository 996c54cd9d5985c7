"""What the gateway says of itself: ``/ready``'s answer, and the gauges set at a scrape."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from llm_operator.gateway.routing.routes import RouteTable
from llm_operator.gateway.routing.sleepers import Sleepers
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.gateway.upstream.credentials import KeyUnavailable


def readiness(table: RouteTable) -> web.Response:
    """200 once every route's key can be read, 503 naming each route whose key cannot.

    Ready says how many client keys are in force, and warns where the keys file is
    invalid and the last good keys serve.
    """
    problems = []
    for state in table.states():
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
    ready: dict[str, Any] = {"status": "ready", "routes": len(table.config.routes)}
    gate = table.gate
    if gate is not None:
        gate.source.current()
        ready["clientKeys"] = len(gate.source.keyring.keys)
        if gate.source.problem:  # serving with the last good keys
            ready["warnings"] = [gate.source.problem]
    return web.json_response(ready)


def export_states(table: RouteTable, metrics: GatewayMetrics, sleepers: Sleepers) -> None:
    """The gauges read from live state when Prometheus scrapes.

    Each circuit breaker's state, the requests in flight per upstream, engines awake and
    the requests waiting for one to be woken.
    """
    for where, breaker in table.breakers.items():
        metrics.circuit.labels(*where).set(int(breaker.state))
    metrics.in_flight.clear()
    for base, load in table.loads.items():
        metrics.in_flight.labels(base).set(load.in_flight)
    metrics.engine_awake.clear()
    metrics.engine_wake_waiting.clear()
    for group in sleepers.groups.values():
        for engine in group.engines.values():
            metrics.engine_wake_waiting.labels(group.name, engine.url).set(engine.waiting)
            if engine.state != "unknown":
                metrics.engine_awake.labels(group.name, engine.url).set(
                    int(engine.state in ("awake", "draining")))
