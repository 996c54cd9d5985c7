"""PodDisruptionBudgets: a voluntary eviction (kubectl drain) never takes a model's last replica."""

from __future__ import annotations

from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.render.meta import metadata, selector_labels

API_VERSION, KIND = "policy/v1", "PodDisruptionBudget"


def budget(model: LLMModel, workload: dict[str, Any], component: str,
           owner_uid: str | None) -> dict[str, Any]:
    """At most one of ``workload``'s pods evicted at a time, and none while one is unready.

    A Deployment's pods are its selector's; a LeaderWorkerSet's or DisaggregatedSet's are
    every pod of the model (a group is down when any of its pods is, so one pod at a time
    is one group at a time). ``maxUnavailable: 1`` counts an unready pod as unavailable, so
    with two replicas and one not Ready the Eviction API refuses the other.
    ``unhealthyPodEvictionPolicy: AlwaysAllow`` lets a drain evict a pod that is not
    Ready anyway (a crash-looping replica must not block a node's drain).
    """
    spec = workload.get("spec") or {}
    match = (spec.get("selector") or {}).get("matchLabels") \
        if workload["kind"] == "Deployment" else None
    return pods_budget(metadata(model, workload["metadata"]["name"], component, owner_uid),
                       dict(match or selector_labels(model)))


def pods_budget(meta: dict[str, Any], match: dict[str, str]) -> dict[str, Any]:
    """``budget``'s object for the pods ``match`` selects, with ``meta`` (a model pool's)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": meta,
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": match},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def budgets(model: LLMModel, workloads: list[dict[str, Any]], component: str,
            owner_uid: str | None, *, most: int) -> list[dict[str, Any]]:
    """One budget per workload that may run two or more replicas.

    ``most`` is the spec's bound, for a workload whose replicas the autoscaler sets.
    """
    out = []
    for workload in workloads:
        replicas = (workload.get("spec") or {}).get("replicas")
        if (replicas if replicas is not None else most) >= 2:
            out.append(budget(model, workload, component, owner_uid))
    return out
