"""A model of KEDA + HPA scaling, following their documented rules, for simulation tests.

- Every ``pollingInterval`` KEDA reads each trigger. A trigger is *active* when its value is
  above its activation threshold. With no replica, any active trigger scales to 1
  (activation); after ``cooldownPeriod`` seconds without an active trigger, a model with
  ``minReplicaCount: 0`` scales back to 0.
- With replicas, the HPA computes, per trigger (AverageValue target),
  ``ceil(value / target)`` and takes the largest, clamped to [max(min, 1), max]. Scale-up is
  immediate; scale-down takes the highest recommendation of the last 300 s (the HPA's default
  stabilization window).
- A Prometheus query over pod metrics returns nothing while there is no pod, i.e. 0: only the
  HTTP add-on's pending-request count can wake a model from zero.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

STABILIZATION_SECONDS = 300


@dataclass(frozen=True)
class Load:
    """One polling step: requests waiting in the engines, and at the HTTP interceptor."""

    queue: float
    pending: float = 0.0


def simulate(scaled_object: dict[str, Any], http_target: float | None,
             loads: list[Load]) -> list[int]:
    spec = scaled_object["spec"]
    low, high = spec["minReplicaCount"], spec["maxReplicaCount"]
    step, cooldown = spec["pollingInterval"], spec["cooldownPeriod"]
    prom = next(t["metadata"] for t in spec["triggers"] if t["type"] == "prometheus")
    threshold, activation = float(prom["threshold"]), float(prom["activationThreshold"])
    has_http = any(t["type"] == "external-push" for t in spec["triggers"])
    replicas, idle_for = low, 0.0
    history: deque[int] = deque(maxlen=STABILIZATION_SECONDS // step)
    out = []
    for load in loads:
        queue = load.queue if replicas > 0 else 0.0  # no pods, no pod metrics
        pending = load.pending if has_http else 0.0
        active = queue > activation or pending > 0
        idle_for = 0.0 if active else idle_for + step
        if replicas == 0:
            replicas = 1 if active else 0
        elif low == 0 and idle_for >= cooldown:
            replicas = 0
        else:
            wanted = math.ceil(queue / threshold)
            if http_target:
                wanted = max(wanted, math.ceil(pending / http_target))
            wanted = min(max(wanted, low, 1), high)
            history.append(wanted)
            replicas = wanted if wanted >= replicas else max(history)
        if replicas == 0:
            history.clear()
        out.append(replicas)
    return out
