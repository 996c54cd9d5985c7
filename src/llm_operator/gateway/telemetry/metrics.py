"""Prometheus metrics of the gateway: per route and client key id, never a key itself."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from llm_operator.gateway.flow.queue import FlowObserver
from llm_operator.gateway.telemetry.tallies import spreads, tallies

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120,
                 300)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
NO_ROUTE = "none"  # label for requests that matched no route


class GatewayMetrics:
    """One registry per gateway, so several gateways (tests) never share counters.

    What every proxied request updates is a ``tallies`` or ``spreads`` family
    (gateway/telemetry/tallies.py: no lock per update, the same samples on /metrics); the rest are
    prometheus_client's.
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = tallies("llmop_gateway_requests", "Requests by route and HTTP status.",
                                ["route", "status"], registry=r)
        self.latency = spreads("llmop_gateway_request_duration_seconds",
                               "Time from request to the last byte of the response.",
                               ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = spreads("llmop_gateway_time_to_first_token_seconds",
                            "Streams: time from request to the first upstream chunk sent.",
                            ["route"], buckets=TTFT_BUCKETS, registry=r)
        self.tokens = tallies("llmop_gateway_tokens", "Tokens reported in upstream usage.",
                              ["route", "kind"], registry=r)
        self.cached_prompt_tokens = tallies(
            "llmop_gateway_cached_prompt_tokens", "Prompt tokens the engine reported served "
            "from its prefix cache (usage.prompt_tokens_details.cached_tokens); a part of "
            "llmop_gateway_tokens{kind=\"prompt\"}.", ["route"], registry=r)
        self.cost = tallies("llmop_gateway_cost_usd", "Estimated cost from usage and prices.",
                            ["route"], registry=r)
        self.rate_limited = Counter("llmop_gateway_rate_limited",
                                    "Requests refused by the route's rate limit.", ["route"],
                                    registry=r)
        self.retries = Counter("llmop_gateway_retries", "Upstream retries.", ["route"],
                               registry=r)
        self.failovers = Counter("llmop_gateway_failovers",
                                 "Requests moved to the route's next upstream after a "
                                 "failure.", ["route"], registry=r)
        self.upstream_errors = Counter("llmop_gateway_upstream_errors",
                                       "Upstream failures by kind (status code, connect, "
                                       "timeout, circuit_open).", ["route", "reason"], registry=r)
        self.held = Gauge("llmop_gateway_held_requests",
                          "Requests waiting for a model that has no replica yet (scale "
                          "from zero).", ["route"], registry=r)
        self.in_flight = Gauge("llmop_gateway_in_flight_requests",
                               "Requests sent to an upstream (base URL) and not yet answered "
                               "in full.", ["upstream"], registry=r)
        self.circuit = Gauge("llmop_gateway_circuit_state",
                             "Circuit per route and upstream host: 0 closed, 1 half-open, "
                             "2 open.", ["route", "upstream"], registry=r)
        # Client keys (clientKeys configured): by the key's id from the keys file.
        self.key_requests = tallies("llmop_gateway_key_requests",
                                    "Requests by client key id and HTTP status.",
                                    ["key", "status"], registry=r)
        self.key_tokens = tallies("llmop_gateway_key_tokens", "Tokens used per client key.",
                                  ["key", "kind"], registry=r)
        self.key_cost = tallies("llmop_gateway_key_cost_usd", "Estimated cost per client key.",
                                ["key"], registry=r)
        self.key_spend = Gauge("llmop_gateway_key_spend_usd",
                               "Spend of the key's current budget period.", ["key"], registry=r)
        self.key_refused = Counter("llmop_gateway_key_refused",
                                   "Requests refused for a key: model, rate_limit, budget.",
                                   ["key", "reason"], registry=r)
        self.shared_up = Gauge("llmop_gateway_shared_limits_up",
                               "1 while limits and spend are shared in Redis, 0 while this "
                               "process falls back to its own (redis configured).",
                               registry=r)
        # Flow control: by route pool (a model's routes share one) and band.
        self.queue_depth = Gauge("llmop_gateway_queue_depth",
                                 "Requests waiting for a free slot of a model's replicas.",
                                 ["route", "band"], registry=r)
        self.queue_wait = spreads("llmop_gateway_queue_wait_seconds",
                                  "Time a request waited for a slot (0: none).",
                                  ["route", "band"], buckets=QUEUE_BUCKETS, registry=r)
        self.flow_requests = tallies("llmop_gateway_flow_requests",
                                     "Requests by flow-control outcome: admitted, shed, "
                                     "queue_full, timeout, cancelled, overloaded, displaced.",
                                     ["route", "band", "outcome"], registry=r)
        self.flow_ignored = Counter("llmop_gateway_flow_band_ignored",
                                    "Band or objective headers not taken: unknown, above_key "
                                    "(higher than the client key's band), unknown_key_band.",
                                    ["route", "reason"], registry=r)
        self.engine_queue = Gauge("llmop_gateway_engine_queue_allowed",
                                  "Requests a model's replicas may hold in their engines "
                                  "beyond their slots, all replicas together (adapted: "
                                  "flowControl.saturation).", ["route"], registry=r)
        self.engine_unreadable = Counter("llmop_gateway_engine_metrics_unreadable",
                                         "Looks at an engine's /metrics that got no answer "
                                         "(its replica keeps flowControl.engineQueue).",
                                         ["route"], registry=r)
        self.peer_requests = Counter(
            "llmop_gateway_peer_requests", "Requests for a model whose queue another router "
            "replica holds: passed (sent on to it), unreachable (served here instead), cut "
            "(it stopped mid-answer).", ["route", "outcome"], registry=r)
        self.sleep_changes = Counter(
            "llmop_gateway_engine_sleep_changes", "Engines of a sleep group put to sleep or "
            "woken (action sleep, wake) to serve a request, by outcome (ok, failed).",
            ["group", "action", "outcome"], registry=r)
        self.engine_awake = Gauge(
            "llmop_gateway_engine_awake", "Engines of a sleep group (a route's sleep): 1 "
            "awake, 0 asleep or changing (absent while not known).", ["group", "upstream"],
            registry=r)
        self.engine_wake_waiting = Gauge(
            "llmop_gateway_engine_wake_waiting", "Requests waiting for an engine of a sleep "
            "group to be woken (its turn, the group's minAwakeSeconds or wake budget).",
            ["group", "upstream"], registry=r)
        self.batches_unfinished = Gauge(
            "llmop_gateway_batches_unfinished", "Batch API batches not finished (validating, "
            "in progress, finalizing, cancelling), as the replica running batches sees them "
            "(0 on the others).", registry=r)
        self.batch_requests_left = Gauge(
            "llmop_gateway_batch_requests_left", "Requests of the batch being run that have "
            "no result yet.", registry=r)
        self.batch_requests = Counter(
            "llmop_gateway_batch_requests", "Batch requests by result: completed (the "
            "output file), failed (the error file), retried (refused for now: sent again).",
            ["outcome"], registry=r)
        # Guardrails: what each guard found (entity types, never the text).
        self.guard_activations = Counter(
            "llmop_gateway_guardrail_activations", "Guards that found something, by guard, "
            "direction (input, output, moderation), action (mask, block, log, flag) and "
            "entity type.", ["route", "guard", "direction", "action", "entity"], registry=r)
        self.guard_seconds = Histogram(
            "llmop_gateway_guardrail_seconds", "Time a request's or an answer's guards took "
            "(queued for the guards' worker thread included).", ["route", "direction"],
            buckets=LATENCY_BUCKETS, registry=r)
        self.guard_errors = Counter(
            "llmop_gateway_guardrail_errors", "Checks that could not run (a detector "
            "missing or failing): the request was refused (503).", ["route", "direction"],
            registry=r)
        self.auth_failures = Counter("llmop_gateway_auth_failures",
                                     "Requests without a valid key: missing, invalid.",
                                     ["reason"], registry=r)


class Children:
    """A labelled metric's children for one fixed label, by the last label, bound on first use.

    ``labels()`` takes a lock and builds a tuple on every call; a request's counters use it
    once per new value instead.
    """

    def __init__(self, metric: Any, fixed: str) -> None:
        self._metric, self._fixed = metric, fixed
        self._bound: dict[object, Any] = {}

    def __call__(self, value: object) -> Any:
        child = self._bound.get(value)
        if child is None:
            child = self._bound[value] = self._metric.labels(self._fixed, str(value))
        return child


class RouteMetrics:
    """One route's series, bound once (label lookups cost on every request otherwise)."""

    def __init__(self, metrics: GatewayMetrics, route: str) -> None:
        self.latency = metrics.latency.labels(route)
        self.ttft = metrics.ttft.labels(route)
        self.prompt_tokens = metrics.tokens.labels(route, "prompt")
        self.completion_tokens = metrics.tokens.labels(route, "completion")
        self.cached_prompt_tokens = metrics.cached_prompt_tokens.labels(route)
        self.cost = metrics.cost.labels(route)
        self.rate_limited = metrics.rate_limited.labels(route)
        self.retries = metrics.retries.labels(route)
        self.failovers = metrics.failovers.labels(route)
        self._by_status = Children(metrics.requests, route)
        self._errors = Children(metrics.upstream_errors, route)

    def request(self, status: int, seconds: float) -> None:
        self._by_status(status).inc()
        self.latency.observe(seconds)

    def upstream_error(self, reason: str) -> None:
        self._errors(reason).inc()


class FlowMetrics(FlowObserver):
    """Flow control's reports as Prometheus series (a flow.FlowObserver)."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self._bound: dict[tuple[str, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (str(id(metric)), *labels)
        child = self._bound.get(key)
        if child is None:
            child = self._bound[key] = metric.labels(*labels)
        return child

    def depth(self, pool: str, band: str, queued: int) -> None:
        self._child(self._metrics.queue_depth, pool, band).set(queued)

    def admitted(self, pool: str, band: str, waited: float) -> None:
        self._child(self._metrics.queue_wait, pool, band).observe(waited)
        self._child(self._metrics.flow_requests, pool, band, "admitted").inc()

    def refused(self, pool: str, band: str, outcome: str) -> None:
        self._child(self._metrics.flow_requests, pool, band, outcome).inc()

    def ignored(self, pool: str, reason: str) -> None:
        self._child(self._metrics.flow_ignored, pool, reason).inc()
