"""What serves a model, summed up for status: roles and DisaggregatedSets read as one."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.reconcile import workloads


def deployment(replicas: int, ready: int, updated: int | None = None) -> dict[str, Any]:
    return {"spec": {"replicas": replicas},
            "status": {"readyReplicas": ready,
                       "updatedReplicas": replicas if updated is None else updated}}


def rolling(summary: dict[str, Any] | None) -> str:
    conditions = (summary or {})["status"]["conditions"]
    return next(c["status"] for c in conditions if c["type"] == "UpdateInProgress")


# (case, prefill, decode, desired, ready, rolling)
ROLES = [
    ("both ready", deployment(1, 1), deployment(3, 3), 3, 3, "False"),
    ("prefill ready, decode not: nothing serves", deployment(1, 1), deployment(2, 0), 2, 0,
     "False"),
    ("decode ready, prefill not: the Service answers", deployment(1, 0), deployment(2, 2), 2,
     2, "False"),
    ("prefill rolling out", deployment(2, 2, updated=1), deployment(2, 2), 2, 2, "True"),
    ("decode not created yet", deployment(1, 1), None, 0, 0, "False"),
]


@pytest.mark.parametrize(("case", "prefill", "decode", "desired", "ready", "moving"), ROLES,
                         ids=[r[0] for r in ROLES])
def test_roles_are_counted_by_their_decode_pods(
        case: str, prefill: dict[str, Any], decode: dict[str, Any] | None, desired: int,
        ready: int, moving: str) -> None:
    summary = workloads.roles(prefill, decode)
    assert summary is not None
    assert (summary["spec"]["replicas"], summary["status"]["readyReplicas"]) == \
        (desired, ready)
    assert rolling(summary) == moving


def test_no_role_yet_is_no_workload() -> None:
    assert workloads.roles(None, None) is None


def test_a_stuck_rollout_of_either_role_is_reported() -> None:
    stuck = {**deployment(1, 0), "status": {"conditions": [
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet has timed out progressing"}]}}
    summary = workloads.roles(stuck, deployment(1, 1))
    assert summary is not None
    reasons = [c.get("reason") for c in summary["status"]["conditions"]]
    assert "ProgressDeadlineExceeded" in reasons


def test_a_disaggregatedset_is_read_from_its_decode_role() -> None:
    ds = {"spec": {"roles": [{"name": "prefill", "spec": {"replicas": 1}},
                             {"name": "decode", "spec": {"replicas": 3}}]},
          "status": {"roleStatuses": [
              {"name": "prefill", "replicas": 1, "readyReplicas": 1, "updatedReplicas": 0},
              {"name": "decode", "replicas": 3, "readyReplicas": 2, "updatedReplicas": 3}]}}
    summary = workloads.disaggregated_set(ds)
    assert (summary["spec"]["replicas"], summary["status"]["readyReplicas"]) == (3, 2)
    assert rolling(summary) == "True"  # prefill has not been updated yet


@pytest.mark.parametrize(("kind", "labels", "serves"), [
    ("Deployment", {}, True),
    ("LeaderWorkerSet", {"leaderworkerset.sigs.k8s.io/worker-index": "0"}, True),
    ("LeaderWorkerSet", {"leaderworkerset.sigs.k8s.io/worker-index": "1"}, False),
    ("DisaggregatedRoles", {"llm-d.ai/role": "decode"}, True),
    ("DisaggregatedRoles", {"llm-d.ai/role": "prefill"}, False),
])
def test_which_pods_answer_the_service(kind: str, labels: dict[str, str], serves: bool) -> None:
    assert workloads.serving(kind, {"metadata": {"labels": labels}}) is serves
