"""The GPU queue: which accelerator models may start now, and in what order the rest wait (pure).

Capacity is what Nodes offer (allocatable ``nvidia.com/gpu``, ``amd.com/gpu``,
``habana.ai/gaudi``, or the resource the pods ask for instead, a MIG instance's
``nvidia.com/mig-3g.40gb`` or a shared GPU's; with DRA the devices the drivers'
ResourceSlices publish for the node) on schedulable nodes that match a model's
node selector and required node affinity. Running models (those with a workload: a
Deployment, a LeaderWorkerSet, prefill and decode roles) keep what they hold and are never
queued. The others are
considered by priority, then creation time: each is placed pod by pod (first fit; a
replica across nodes is several pods, a disaggregated model two roles of pods); the first
that does not fit waits, and so does everything after it that wants the same accelerator,
so the head of a queue is always the next to start. A model that no node could ever hold
waits without blocking the others.
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
    pods: tuple[int, ...]  # the accelerators each pod needs, on one node
    priority: str = "normal"
    created: str = ""  # RFC 3339: sorts in time order
    running: bool = False  # it has a Deployment: it holds its share
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[tuple[Mapping[str, Any], ...], ...] = ()  # required terms (ORed)

    @property
    def needs(self) -> str:
        """E.g. "2 x 4 nvidia.com/gpu", or "1 x 4 + 3 x 2 nvidia.com/gpu" for mixed pods."""
        counts: dict[int, int] = {}
        for size in self.pods:
            counts[size] = counts.get(size, 0) + 1
        parts = [f"{n} x {size}" for size, n in counts.items()] or ["0 x 0"]
        return f"{' + '.join(parts)} {self.resource}"

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


DEVICES = "devices/"  # what a DRA claim counts: devices/<vendor>, from ResourceSlices


def devices_by_node(slices: Iterable[Mapping[str, Any]], vendors: Mapping[str, str]
                    ) -> dict[str, dict[str, int]]:
    """Devices each node's DRA drivers publish: node -> {devices/<vendor>: count}.

    ``vendors`` maps a driver's name to its vendor. Only a pool's newest generation counts
    (a driver replaces its slices by publishing a new one), and only node-local slices.
    """
    slices = [s for s in slices if (s.get("spec") or {}).get("driver") in vendors]
    newest: dict[tuple[str, str], int] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        pool = spec.get("pool") or {}
        key = (str(spec.get("driver")), str(pool.get("name")))
        newest[key] = max(newest.get(key, 0), int(pool.get("generation", 0)))
    out: dict[str, dict[str, int]] = {}
    for piece in slices:
        spec = piece.get("spec") or {}
        pool = spec.get("pool") or {}
        node = spec.get("nodeName")
        if not node or int(pool.get("generation", 0)) < newest[
                (str(spec.get("driver")), str(pool.get("name")))]:
            continue
        resource = f"{DEVICES}{vendors[str(spec.get('driver'))]}"
        counts = out.setdefault(str(node), {})
        counts[resource] = counts.get(resource, 0) + len(spec.get("devices") or [])
    return out


def node_of(obj: Mapping[str, Any], devices: Mapping[str, Mapping[str, int]] | None = None
            ) -> Node:
    """A Kubernetes Node object as the queue sees it (with its DRA devices, if given)."""
    allocatable = {}
    for key, quantity in ((obj.get("status") or {}).get("allocatable") or {}).items():
        try:
            allocatable[str(key)] = int(str(quantity))
        except ValueError:
            continue  # cpu "7500m", memory "31Gi": not accelerator counts
    meta = obj.get("metadata") or {}
    allocatable.update((devices or {}).get(str(meta.get("name", "")), {}))
    return Node(str(meta.get("name", "")), allocatable, dict(meta.get("labels") or {}),
                not (obj.get("spec") or {}).get("unschedulable", False))


def _place(claim: Claim, free: dict[str, int], nodes: list[Node]) -> list[str] | None:
    """Nodes for each pod (first fit), or None; ``free`` is taken from only on success."""
    trial = dict(free)
    chosen = []
    for size in claim.pods:
        node = next((n for n in nodes if claim.fits(n) and trial.get(n.name, 0) >= size),
                    None)
        if node is None:
            return None
        trial[node.name] -= size
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
        needs = claim.needs
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


Workload = tuple[str, dict[str, Any]]  # (kind, object): kinds are not on listed items


def _cards(template: Mapping[str, Any] | None, resource: str) -> int:
    """The accelerators one pod of a template asks for (its containers' limits)."""
    containers = ((template or {}).get("spec") or {}).get("containers") or []
    return sum(int(str(((c.get("resources") or {}).get("limits") or {}).get(resource, 0)))
               for c in containers)


def pods_of(workload: Workload, resource: str, default_replicas: int) -> list[int]:
    """The accelerators of each pod a workload runs (or will run: ``default_replicas``)."""
    kind, obj = workload
    spec = obj.get("spec") or {}
    if kind == "DisaggregatedSet":
        return [n for role in spec.get("roles") or []
                for n in pods_of(("LeaderWorkerSet", role), resource, default_replicas)]
    replicas = int(spec.get("replicas", default_replicas))
    if kind == "LeaderWorkerSet":
        group = spec.get("leaderWorkerTemplate") or {}
        worker = group.get("workerTemplate")
        size = int(group.get("size", 1))
        one = [_cards(group.get("leaderTemplate") or worker, resource)] + \
            [_cards(worker, resource)] * (size - 1)
        return one * replicas
    return [_cards(spec.get("template"), resource)] * replicas


def _pod_spec(workload: Workload) -> Mapping[str, Any]:
    """The pod spec whose node selector and affinity the workload's pods share."""
    kind, obj = workload
    spec = obj.get("spec") or {}
    if kind == "DisaggregatedSet":
        return _pod_spec(("LeaderWorkerSet", (spec.get("roles") or [{}])[0]))
    if kind == "LeaderWorkerSet":
        group = spec.get("leaderWorkerTemplate") or {}
        template = group.get("leaderTemplate") or group.get("workerTemplate") or {}
    else:
        template = spec.get("template") or {}
    return dict(template.get("spec") or {})


def _asked(pod: Mapping[str, Any], vendor_key: str) -> str:
    """The accelerator resource the pods ask for, of the vendor's domain.

    The vendor's own, or a MIG instance's (nvidia.com/mig-3g.40gb) or a shared GPU's
    (nvidia.com/gpu.shared).
    """
    domain = vendor_key.split("/", maxsplit=1)[0] + "/"
    asked = sorted(key for c in pod.get("containers") or []
                   for key in ((c.get("resources") or {}).get("limits") or {})
                   if str(key).startswith(domain))
    return asked[0] if asked else vendor_key


def claim_of(model: LLMModel, workloads: list[Workload], *, running: bool) -> Claim | None:
    """What an accelerator model claims, from its workloads; None without accelerators.

    ``workloads`` are the live ones when it runs (it then holds what they ask for), else
    the rendered ones (a workload without replicas is autoscaled: its minimum, at least 1).
    """
    spec = model.spec
    resource = vendor(spec.accelerator_vendor).resource_key
    if not spec.needs_accelerators or resource is None or not workloads:
        return None
    pod = _pod_spec(workloads[0])
    default = max(1, spec.scaling.min_replicas)
    if pod.get("resourceClaims"):  # DRA: each pod's claim asks acceleratorCount devices
        resource = f"{DEVICES}{spec.accelerator_vendor}"
        pods = tuple(spec.resources.accelerator_count for w in workloads
                     for _ in pods_of(w, resource, default))
    else:
        resource = _asked(pod, resource)
        pods = tuple(n for w in workloads for n in pods_of(w, resource, default))
    terms = ((((pod.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    return Claim((model.namespace, model.name), resource, pods,
                 spec.priority or "normal", model.metadata.creation_timestamp or "", running,
                 dict(pod.get("nodeSelector") or {}),
                 tuple(tuple(t.get("matchExpressions") or ()) for t in terms))
