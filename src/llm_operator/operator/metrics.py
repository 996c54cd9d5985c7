"""The operator's own Prometheus metrics: reconciles, errors, durations, writes, phases."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from llm_operator.api.model_status import PHASES


class OperatorMetrics:
    """One registry per operator run.

    Model labels use ``model_namespace`` so they never collide with the ``namespace`` target
    label Prometheus adds.
    """

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.reconciles = Counter("llmop_operator_reconciles", "Reconciles by outcome.",
                                  ["result"], registry=r)
        self.errors = Counter("llmop_operator_reconcile_errors",
                              "Reconciles that failed and will be retried.", registry=r)
        self.duration = Histogram("llmop_operator_reconcile_duration_seconds",
                                  "Time one reconcile takes.", registry=r,
                                  buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.applied = Counter("llmop_operator_children_applied",
                               "Children created or updated.", registry=r)
        self.pruned = Counter("llmop_operator_children_pruned", "Children deleted as stale.",
                              registry=r)
        self.queued = Gauge("llmop_operator_reconcile_queue_depth",
                            "Models queued for a reconcile, waiting for a worker.",
                            registry=r)
        self.in_flight = Gauge("llmop_operator_reconciles_in_flight",
                               "Reconciles running right now.", registry=r)
        self.phase = Gauge("llmop_operator_model_phase",
                           "1 for each model's current phase, 0 for the others.",
                           ["model_namespace", "name", "phase"], registry=r)

        self.autoscaler_looks = Counter(
            "llmop_operator_autoscaler_looks", "Looks of the built-in autoscaler at the "
            "router's counts (one per interval while it sets replicas).", registry=r)
        self.autoscaler_changes = Counter(
            "llmop_operator_autoscaler_scalings", "Replica changes the built-in autoscaler "
            "wrote, by reason (FirstRequest, Load, LoadFell, Idle, AboveMax, BelowMin, "
            "OutOfBounds).", ["reason"], registry=r)

    def set_phase(self, namespace: str, name: str, phase: str) -> None:
        for candidate in PHASES:
            self.phase.labels(namespace, name, candidate).set(1 if candidate == phase else 0)

    def forget(self, namespace: str, name: str) -> None:
        for candidate in PHASES:
            with contextlib.suppress(KeyError):
                self.phase.remove(namespace, name, candidate)

    def serve(self, port: int) -> None:
        start_http_server(port, registry=self.registry)
