"""The GPU queue: which accelerator models may start now, and in what order the rest wait (pure).

Capacity is what Nodes offer (allocatable ``nvidia.com/gpu``, ``amd.com/gpu``,
``habana.ai/gaudi``) on schedulable nodes that match a model's node selector and required
node affinity. Running models (those with a Deployment) keep what they hold and are never
queued. The others are considered by priority, then creation time: each is placed replica
by replica (first fit); the first that does not fit waits, and so does everything after it
that wants the same accelerator, so the head of a queue is always the next to start. A
model that no node could ever hold waits without blocking the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.vendors import vendor

PRIORITIES = {"batch": 100, "low": 1_000, "normal": 10_000, "high": 100_000,
              "critical": 1_000_000}  # also the PriorityClass values the install ships


@dataclass(frozen=True)
class Node:
    """What one Node can give models: allocatable accelerators, labels, schedulable."""

    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str]
    schedulable: bool = True


@dataclass(frozen=True)
class Claim:
    """What one accelerator model needs to run, and where it may run."""

    key: tuple[str, str]  # namespace, name
    resource: str  # e.g. nvidia.com/gpu
    per_replica: int
    replicas: int
    priority: str = "normal"
    created: str = ""  # RFC 3339: sorts in time order
    running: bool = False  # it has a Deployment: it holds its share
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[Mapping[str, Any], ...], ...] = ()  # required terms (ORed)

    def fits(self, node: Node) -> bool:
        """Whether the node is one the scheduler could put a replica on (ignoring load)."""
        if not node.schedulable or any(node.labels.get(k) != v
                                       for k, v in self.node_selector.items()):
            return False
        return not self.affinity or any(all(_matches(node.labels, e) for e in term)
                                        for term in self.affinity)


@dataclass(frozen=True)
class Admission:
    """The queue's answer for one claim."""

    admitted: bool
    position: int | None = None  # 1-based place among those waiting for the same resource
    reason: str = ""


def _matches(labels: Mapping[str, str], expression: Mapping[str, Any]) -> bool:
    """One nodeSelectorTerm matchExpression, as the scheduler reads it."""
    key, operator = str(expression.get("key")), expression.get("operator")
    values = [str(v) for v in expression.get("values") or []]
    value = labels.get(key)
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in {"Gt", "Lt"} and value is not None and values:
        try:
            number, bound = int(value), int(values[0])
        except ValueError:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def node_of(obj: Mapping[str, Any]) -> Node:
    """A Kubernetes Node object as the queue sees it."""
    allocatable = {}
    for key, quantity in ((obj.get("status") or {}).get("allocatable") or {}).items():
        try:
            allocatable[str(key)] = int(str(quantity))
        except ValueError:
            continue  # cpu "7500m", memory "31Gi": not accelerator counts
    meta = obj.get("metadata") or {}
    return Node(str(meta.get("name", "")), allocatable, dict(meta.get("labels") or {}),
                not (obj.get("spec") or {}).get("unschedulable", False))


def _place(claim: Claim, free: dict[str, int], nodes: list[Node]) -> list[str] | None:
    """Nodes for each replica (first fit), or None; ``free`` is taken from only on success."""
    trial = dict(free)
    chosen = []
    for _ in range(claim.replicas):
        node = next((n for n in nodes if claim.fits(n)
                     and trial.get(n.name, 0) >= claim.per_replica), None)
        if node is None:
            return None
        trial[node.name] -= claim.per_replica
        chosen.append(node.name)
    free.update(trial)
    return chosen


def _order(claim: Claim) -> tuple[int, str, tuple[str, str]]:
    return -PRIORITIES.get(claim.priority, PRIORITIES["normal"]), claim.created, claim.key


def admit(claims: Iterable[Claim], nodes: Iterable[Node]) -> dict[tuple[str, str], Admission]:
    """Every claim's admission, given what the nodes offer and the running claims hold."""
    claims, nodes = list(claims), sorted(nodes, key=lambda n: n.name)
    out: dict[tuple[str, str], Admission] = {}
    free_by_resource: dict[str, dict[str, int]] = {}

    def free(resource: str) -> dict[str, int]:
        return free_by_resource.setdefault(
            resource, {n.name: n.allocatable.get(resource, 0) for n in nodes})

    for claim in sorted((c for c in claims if c.running), key=_order):
        _place(claim, free(claim.resource), nodes)  # what it holds (best effort)
        out[claim.key] = Admission(True, reason="running")
    blocked: dict[str, Claim] = {}  # resource -> the head of its queue
    waiting: dict[str, int] = {}
    for claim in sorted((c for c in claims if not c.running), key=_order):
        needs = f"{claim.replicas} x {claim.per_replica} {claim.resource}"
        empty = {n.name: n.allocatable.get(claim.resource, 0) for n in nodes}
        if _place(claim, empty, nodes) is None:
            largest = max((n.allocatable.get(claim.resource, 0) for n in nodes
                           if claim.fits(n)), default=0)
            out[claim.key] = Admission(False, None, (
                f"needs {needs}, and no set of matching schedulable nodes could ever hold it "
                f"(the largest offers {largest}): add such nodes, or lower "
                "resources.acceleratorCount or scaling.minReplicas"))
            continue
        head = blocked.get(claim.resource)
        placed = None if head is not None else _place(claim, free(claim.resource), nodes)
        if placed is not None:
            out[claim.key] = Admission(True, reason=f"placed on {', '.join(placed)}")
            continue
        position = waiting[claim.resource] = waiting.get(claim.resource, 0) + 1
        available = sum(free(claim.resource).get(n.name, 0) for n in nodes if claim.fits(n))
        behind = "" if head is None else \
            f", behind {head.key[0]}/{head.key[1]} ({head.priority})"
        out[claim.key] = Admission(False, position, (
            f"waiting for accelerators: needs {needs}; {available} free on matching nodes"
            f"{behind}"))
        blocked.setdefault(claim.resource, claim)
    return out


def claim_of(model: LLMModel, pod: Mapping[str, Any], *, running_replicas: int | None
             ) -> Claim | None:
    """What an accelerator model claims, from its rendered pod spec; None without one.

    ``running_replicas`` is its Deployment's replica count when it has one (it then holds
    that many), None when it has not started.
    """
    spec = model.spec
    resource = vendor(spec.accelerator_vendor).resource_key
    if not spec.needs_accelerators or resource is None:
        return None
    running = running_replicas is not None
    replicas = running_replicas if running_replicas is not None else max(
        1, spec.scaling.min_replicas)
    terms = ((((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    return Claim((model.namespace, model.name), resource, spec.resources.accelerator_count,
                 replicas,
                 spec.priority or "normal", model.metadata.creation_timestamp or "", running,
                 dict(pod.get("nodeSelector") or {}),
                 tuple(tuple(t.get("matchExpressions") or ()) for t in terms))
