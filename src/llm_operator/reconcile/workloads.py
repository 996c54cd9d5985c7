"""A model's workload as status reads it: what serves it, summed up like a Deployment.

A model is served by a Deployment, a LeaderWorkerSet (a replica is a group of pods), or
prefill and decode roles (two Deployments, or one DisaggregatedSet). Status counts the
replicas that answer the model's Service, so a disaggregated model's summary counts its
decode pods; a role that is rolling out or failing shows as rolling or Degraded.
"""

from __future__ import annotations

from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.serving import ROLES
from llm_operator.render import disaggregation, multinode, scaling

Ref = tuple[str, str]  # (apiVersion, kind)
DEPLOYMENT_REF: Ref = scaling.DEPLOYMENT
LWS_REF: Ref = multinode.REF
DS_REF: Ref = (disaggregation.API_VERSION, disaggregation.KIND)
REFS = (DEPLOYMENT_REF, LWS_REF, DS_REF)  # the kinds that may serve a model
DEPLOYMENT, LWS, DS = DEPLOYMENT_REF[1], LWS_REF[1], DS_REF[1]
ROLES_KIND = "DisaggregatedRoles"  # prefill and decode Deployments, read as one


def places(name: str) -> list[tuple[Ref, str]]:
    """(kind, name) of every object that may serve the model called ``name``."""
    return [(DEPLOYMENT_REF, name), (LWS_REF, name), (DS_REF, name),
            *((DEPLOYMENT_REF, f"{name}-{role}") for role in ROLES)]


def rendered(objects: list[dict[str, Any]], name: str) -> list[tuple[str, dict[str, Any]]]:
    """The (kind, object) of the rendered objects that serve the model (not its picker)."""
    wanted = {(ref[1], n) for ref, n in places(name)}
    return [(o["kind"], o) for o in objects if (o["kind"], o["metadata"]["name"]) in wanted]


def summary(live: list[tuple[str, dict[str, Any]]], name: str) -> dict[str, Any] | None:
    """The model's workload from the objects that serve it (see places), kind set.

    Its Deployment, its LeaderWorkerSet, its DisaggregatedSet, or its prefill and decode
    Deployments read as one (None: none exists yet). Listed objects carry no kind.
    """
    by_name = {(kind, obj["metadata"]["name"]): obj for kind, obj in live}
    if (found := by_name.get((DEPLOYMENT, name))) is not None:
        return {**found, "kind": DEPLOYMENT}
    if (found := by_name.get((LWS, name))) is not None:
        return {**found, "kind": LWS}
    if (found := by_name.get((DS, name))) is not None:
        return disaggregated_set(found)
    return roles(*(by_name.get((DEPLOYMENT, f"{name}-{role}"))
                   for role in ROLES))


def _counts(obj: dict[str, Any] | None) -> tuple[int, int, int]:
    """(desired, ready, updated) of a Deployment or LeaderWorkerSet."""
    if obj is None:
        return 0, 0, 0
    desired = int((obj.get("spec") or {}).get("replicas", 1))
    status = obj.get("status") or {}
    return desired, int(status.get("readyReplicas", 0)), \
        int(status.get("updatedReplicas", desired))


def _summary(desired: int, ready: int, rolling: bool,
             conditions: list[dict[str, Any]]) -> dict[str, Any]:
    marks = [{"type": "UpdateInProgress", "status": "True" if rolling else "False"}]
    return {"kind": ROLES_KIND, "spec": {"replicas": desired},
            "status": {"readyReplicas": ready, "conditions": [*conditions, *marks]}}


def roles(prefill: dict[str, Any] | None, decode: dict[str, Any] | None
          ) -> dict[str, Any] | None:
    """Prefill and decode Deployments as one workload (None: neither exists yet)."""
    if prefill is None and decode is None:
        return None
    (p_want, _, p_updated), (d_want, d_ready, d_updated) = _counts(prefill), _counts(decode)
    deadline = [c for d in (prefill, decode) if d is not None
                for c in (d.get("status") or {}).get("conditions") or []
                if c.get("reason") == "ProgressDeadlineExceeded"]
    return _summary(d_want, d_ready, p_updated < p_want or d_updated < d_want, deadline)


def disaggregated_set(ds: dict[str, Any]) -> dict[str, Any]:
    """A DisaggregatedSet's decode role as the workload, from its spec and roleStatuses."""
    wanted = {r.get("name"): int((r.get("spec") or {}).get("replicas", 0))
              for r in (ds.get("spec") or {}).get("roles") or []}
    status = ds.get("status") or {}
    seen = {r.get("name"): r for r in status.get("roleStatuses") or []}
    decode = seen.get("decode") or {}
    rolling = any(int(seen.get(name, {}).get("updatedReplicas", 0)) < count
                  for name, count in wanted.items())
    return _summary(wanted.get("decode", 0), int(decode.get("readyReplicas", 0)), rolling, [])


def serving(kind: str, pod: dict[str, Any]) -> bool:
    """Whether the pod answers the model's Service (a group's leader, a decode pod)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if kind == LWS:
        return labels.get(L.LWS_WORKER_INDEX) == "0"
    if kind == ROLES_KIND:
        return labels.get(L.ROLE) == "decode"
    return True
