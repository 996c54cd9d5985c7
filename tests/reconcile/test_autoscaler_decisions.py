"""The built-in autoscaler's decisions over scripted load (pure, milliseconds)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llm_operator.api.v1alpha1 import ScalingSpec
from llm_operator.reconcile.autoscaling import (
    Decision,
    Memory,
    Observation,
    Policy,
    step,
)

# minReplicas 0, maxReplicas 2, 4 requests per replica, 60 s idle to zero, 120 s window
POLICY = Policy(min_replicas=0, max_replicas=2, target_per_replica=4, idle_seconds=60,
                stabilization_seconds=120)


def replay(policy: Policy, observations: list[Observation]) -> list[Decision]:
    """Every decision of a sequence of looks, each applied before the next."""
    decisions: list[Decision] = []
    memory = Memory()
    current = observations[0].current if observations else 0
    for seen in observations:
        decision = step(policy, Observation(seen.now, current, seen.pending, seen.waiting),
                        memory)
        decisions.append(decision)
        memory, current = decision.memory, decision.replicas
    return decisions


def looks(start: int, loads: list[int | None], every: float = 10.0) -> list[Observation]:
    """One look every ``every`` seconds with these router counts, from ``start`` replicas."""
    return [Observation(now=i * every, current=start, pending=p)
            for i, p in enumerate(loads)]


def counts(decisions: list[object]) -> list[int]:
    return [d.replicas for d in decisions]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("start", "loads", "expected", "reasons"), [
    # the first request wakes the model; eight at once need two replicas
    (0, [0, 1, 8], [0, 1, 2], ["Steady", "FirstRequest", "Load"]),
    (0, [8], [2], ["FirstRequest"]),
    # steady load with noise: no change at all (the window keeps the highest need)
    (2, [8, 7, 5, 8, 6, 8, 5, 7], [2] * 8, ["Steady"] * 8),
    # load falls: down only once the window has no higher need, then to zero after idling
    (2, [8] + [1] * 13 + [0] * 8, [2] * 12 + [1] * 7 + [0] * 3, None),
], ids=["wake", "wake to two", "no flapping", "down after the window"])
def test_scripted_load(start: int, loads: list[int | None], expected: list[int],
                       reasons: list[str] | None) -> None:
    decisions = replay(POLICY, looks(start, loads))
    assert counts(decisions) == expected
    if reasons is not None:
        assert [d.reason for d in decisions] == reasons


def test_down_to_one_after_the_window_then_to_zero_after_idling() -> None:
    loads: list[int | None] = [8, *[1] * 13, *[0] * 12]
    decisions = replay(POLICY, looks(2, loads))
    changes = [(i * 10, d.replicas, d.reason) for i, d in enumerate(decisions) if d.changes]
    # the last need of 2 was at 0 s: the 120 s window lets go at 120 s; the last request
    # was seen at 130 s, so 60 s of idling end at 190 s
    assert changes == [(120, 1, "LoadFell"), (190, 0, "Idle")]


def test_min_replicas_one_never_goes_to_zero() -> None:
    decisions = replay(replace(POLICY, min_replicas=1), looks(1, [0] * 30))
    assert set(counts(decisions)) == {1}


@pytest.mark.parametrize("start", [0, 1, 2])
def test_no_signal_holds_the_count_however_long(start: int) -> None:
    decisions = replay(POLICY, looks(start, [None] * 50))
    assert set(counts(decisions)) == {start}
    assert {d.reason for d in decisions} == {"NoSignal"}
    assert decisions[0].message == f"holding {start} replica(s): no load signal from the " \
        "router"


def test_a_lowered_max_is_applied_once_not_oscillated() -> None:
    lowered = replace(POLICY, max_replicas=2)
    decisions = replay(lowered, looks(3, [12] * 6))
    assert counts(decisions) == [2] * 6
    assert [d.reason for d in decisions] == ["AboveMax"] + ["Steady"] * 5


def test_a_new_leader_changes_nothing_by_itself() -> None:
    """Fresh memory at 2 replicas and no load: the window and the idle time start now."""
    decisions = replay(POLICY, looks(2, [0] * 20))
    changes = [(i * 10, d.replicas, d.reason) for i, d in enumerate(decisions) if d.changes]
    assert changes[0] == (60, 0, "Idle")  # a full idle period after taking over, not at once
    first = step(POLICY, Observation(now=0, current=2, pending=0), Memory())
    assert (first.replicas, first.reason) == (2, "Steady")


def test_the_engines_own_queue_counts_when_it_is_longer() -> None:
    seen = Observation(now=0, current=1, pending=2, waiting=7.0)
    assert step(POLICY, seen).replicas == 2


def test_the_policy_is_the_models_scaling_fields() -> None:
    spec = ScalingSpec.model_validate({"minReplicas": 0, "maxReplicas": 4,
                                       "scaleUpThreshold": 3, "cooldownPeriodSeconds": 90})
    assert Policy.of(spec) == Policy(0, 4, 3, 90.0, 300.0)
