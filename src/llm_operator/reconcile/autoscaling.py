"""The built-in autoscaler's decision: replicas from load, with bounds and stabilization (pure).

One ``step`` per look at a model: what the router holds or has in flight for it (and, when
known, the engines' own queue) against ``scaling.scaleUpThreshold`` requests per replica.
Up at once; down only to the highest recommendation of the stabilization window (no
flapping under steady load); to zero only after ``cooldownPeriodSeconds`` with no request
when ``minReplicas`` is 0; never outside ``minReplicas``..``maxReplicas``; and with no
signal (router unreachable) the count holds, whatever it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import ScalingSpec

DEFAULT_STABILIZATION_SECONDS = 300.0  # as the HPA's scale-down window


@dataclass(frozen=True)
class Policy:
    """The bounds and thresholds of one model (from its ``spec.scaling``)."""

    min_replicas: int
    max_replicas: int
    target_per_replica: int  # requests per replica before another one is added
    idle_seconds: float  # with no request this long, a model at minReplicas 0 goes to zero
    stabilization_seconds: float = DEFAULT_STABILIZATION_SECONDS

    @classmethod
    def of(cls, scaling: ScalingSpec,
           stabilization_seconds: float = DEFAULT_STABILIZATION_SECONDS) -> Policy:
        return cls(scaling.min_replicas, scaling.max_replicas, scaling.scale_up_threshold,
                   float(scaling.cooldown_period_seconds), stabilization_seconds)


@dataclass(frozen=True)
class Observation:
    """What is known at ``now``: the replicas asked for, and the load (None: no signal).

    ``pending`` is the router's held and in-flight requests for the model; ``waiting`` the
    engines' own queue (llama-server's requests_deferred, vLLM's num_requests_waiting),
    which also counts requests that did not come through the router.
    """

    now: float
    current: int
    pending: int | None
    waiting: float | None = None

    @property
    def load(self) -> float | None:
        known = [v for v in (self.pending, self.waiting) if v is not None]
        return max(known) if known else None


@dataclass(frozen=True)
class Memory:
    """What the autoscaler remembers of a model between steps.

    Empty (a new leader, a restarted operator) counts as "the current count was just set":
    nothing scales down or to zero before a window has passed.
    """

    recommendations: tuple[tuple[float, int], ...] = ()  # (time, replicas) in the window
    busy_at: float | None = None  # the last time any request was seen


@dataclass(frozen=True)
class Decision:
    """The replicas to run and why (a condition reason, and a sentence for status/Events)."""

    replicas: int
    reason: str
    message: str
    memory: Memory = field(default_factory=Memory)

    @property
    def changes(self) -> bool:
        return self.reason not in ("Steady", "NoSignal")


def _window(memory: Memory, now: float, seconds: float, wanted: int
            ) -> tuple[tuple[float, int], ...]:
    kept = tuple((t, n) for t, n in memory.recommendations if now - t < seconds)
    return (*kept, (now, wanted))


def step(policy: Policy, observation: Observation, memory: Memory = Memory()) -> Decision:
    """The replicas for this model now, and the memory for the next step."""
    current, now, load = observation.current, observation.now, observation.load
    low, high = policy.min_replicas, policy.max_replicas
    if load is None:
        replicas = min(max(current, low), high)
        if replicas != current:
            return Decision(replicas, "OutOfBounds", f"{current} replicas is outside "
                            f"{low}..{high}; no load signal, so only the bounds apply", memory)
        return Decision(current, "NoSignal", f"holding {current} replica(s): no load signal "
                        "from the router", memory)
    if memory == Memory():  # a first look (a new leader): as if the count had just been set
        memory = Memory(((now, current),), now)
    busy_at = now if load > 0 else memory.busy_at
    needed = math.ceil(load / policy.target_per_replica) if load > 0 else 0
    floor = max(low, 1)
    wanted = min(max(needed, floor), high)
    window = _window(memory, now, policy.stabilization_seconds, wanted)
    remembered = Memory(window, busy_at)
    if current == 0:
        if load > 0:
            return Decision(wanted, "FirstRequest", f"{load:g} request(s) waiting for a "
                            "model at zero replicas", remembered)
        if low == 0:
            return Decision(0, "Steady", "idle at zero replicas", remembered)
    if current > high:
        return Decision(high, "AboveMax", f"{current} replicas is more than maxReplicas "
                        f"{high}", remembered)
    if current < low:
        return Decision(max(low, wanted), "BelowMin", f"{current} replicas is fewer than "
                        f"minReplicas {low}", remembered)
    if wanted > current:
        return Decision(wanted, "Load", f"{load:g} request(s) for {current} replica(s), "
                        f"{policy.target_per_replica} per replica wanted", remembered)
    idle_for = now - (busy_at if busy_at is not None else now)
    if low == 0 and load == 0 and idle_for >= policy.idle_seconds:
        return Decision(0, "Idle", f"no request for {idle_for:.0f} s; minReplicas is 0",
                        Memory(((now, 0),), busy_at))
    stable = max(n for _, n in window)  # the highest recommendation of the window
    if stable < current:
        return Decision(stable, "LoadFell", f"{load:g} request(s) need {wanted} replica(s); "
                        f"the highest need in the last {policy.stabilization_seconds:g} s "
                        f"was {stable}", remembered)
    return Decision(current, "Steady", f"{load:g} request(s) for {current} replica(s)",
                    remembered)


# --- what the autoscaler reads, and what status says of it --------------------------------

Loads = dict[str, tuple[int, float]]  # "namespace/name" -> (pending, engines' waiting)


def router_endpoints(slices: list[dict[str, Any]], port_name: str) -> list[str]:
    """``http://address:port`` of every ready endpoint in the router Service's slices."""
    urls = set()
    for piece in slices:
        port = next((p.get("port") for p in piece.get("ports") or []
                     if p.get("name") == port_name), None)
        if port is None:
            continue
        for endpoint in piece.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready") is False:
                continue
            for address in endpoint.get("addresses") or []:
                host = f"[{address}]" if ":" in address else address
                urls.add(f"http://{host}:{port}")
    return sorted(urls)


def combine(answers: list[dict[str, Any]]) -> Loads:
    """One load per model from every router replica's ``GET /scale`` answer.

    Each replica holds and forwards its own requests, so ``pending`` adds up; they all
    scrape the same engines, so ``waiting`` is the highest any of them saw, not a sum.
    """
    loads: Loads = {}
    for answer in answers:
        for key, load in (answer.get("models") or {}).items():
            pending, waiting = loads.get(key, (0, 0.0))
            loads[key] = (pending + int(load.get("pending", 0)),
                          max(waiting, float(load.get("waiting", 0))))
    return loads


@dataclass(frozen=True)
class Report:
    """The model's ``Scaling`` condition: who sets its replicas, the last change and why."""

    active: bool  # False: nothing is scaling it now (no signal, KEDA missing)
    reason: str
    message: str


def report_after(previous: Report | None, decision: Decision, current: int,
                 why_no_signal: str = "") -> Report:
    """The condition after a step; it stays put while nothing changes (no status write)."""
    if decision.changes:
        return Report(True, decision.reason,
                      f"{current} -> {decision.replicas} replica(s): {decision.message}")
    if decision.reason == "NoSignal":
        why = why_no_signal or decision.message
        return Report(False, "NoSignal", f"holding {current} replica(s): {why}")
    if previous is not None and previous.active:
        return previous
    return Report(True, "Steady", f"{current} replica(s) for the load; the router's counts "
                  "are read")
