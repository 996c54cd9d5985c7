"""One reconcile of one LLMModel: place, apply, prune, label, observe, report (thin I/O)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from opentelemetry.trace import NoOpTracer, Tracer

from llm_operator.api import labels as L
from llm_operator.api.pools import pool_scaling
from llm_operator.api.references import declared_in, unknown_guard_models
from llm_operator.api.v1alpha1 import API_VERSION, LLMModel
from llm_operator.api.validation import Problem, parse_llmmodel
from llm_operator.kube import FIELD_MANAGER, PLURALS, ApiError, Kube
from llm_operator.operator.caches import PREFETCH_POD_KIND
from llm_operator.operator.pooled import RECHECK_SECONDS as POOL_RECHECK_SECONDS
from llm_operator.operator.pooled import load_failure, own_claims, pool_desired
from llm_operator.profiles import image_mounts
from llm_operator.profiles.planner import plan
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile import workloads
from llm_operator.reconcile.autoscaling import Report
from llm_operator.reconcile.ownership import drift
from llm_operator.reconcile.queue import Admission
from llm_operator.reconcile.secrets_needed import required_secrets
from llm_operator.reconcile.status import Blocker, Event, Observation, compute_status
from llm_operator.render import claims, placement_problems, pod_node_selector, render
from llm_operator.render.networking import endpoint
from llm_operator.render.pool_engine import pool_endpoint, pool_labels, pool_object_name
from llm_operator.render.registration import lease_left
from llm_operator.render.scaling import autoscaled

CLAIM_TEMPLATE = (claims.API_VERSION, claims.KIND)
# Kinds the operator may have created for a model, checked when pruning.
CHILD_KINDS = (
    ("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("v1", "PersistentVolumeClaim"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"),
    ("apps/v1", "DaemonSet"),
    ("v1", "Service"), ("policy/v1", "PodDisruptionBudget"), ("keda.sh/v1alpha1", "ScaledObject"),
    ("http.keda.sh/v1alpha1", "HTTPScaledObject"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"), ("networking.k8s.io/v1", "NetworkPolicy"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    workloads.LWS_REF, workloads.DS_REF, CLAIM_TEMPLATE,
)
# Kinds a model cannot be served without, when the cluster does not serve them (a CRD not
# installed, an API too old): the reason and what to do (unlike KEDA's or
# Prometheus-Operator's objects, which are skipped).
REQUIRED_KINDS = {
    workloads.LWS_REF: ("LeaderWorkerSetNotInstalled",
               "spans {nodes} nodes per replica, served by a LeaderWorkerSet, and this cluster "
               "has no LeaderWorkerSet CRD: install LeaderWorkerSet "
               "(https://lws.sigs.k8s.io, v0.7 or later), or make the model fit one node"),
    workloads.DS_REF: ("DisaggregatedSetNotInstalled",
              "serves its prefill and decode roles as a DisaggregatedSet (operator setting "
              "disaggregation.workload: disaggregatedset), and this cluster has no "
              "DisaggregatedSet CRD: install it (LeaderWorkerSet's disaggregatedset), or set "
              "disaggregation.workload to auto or deployments"),
    CLAIM_TEMPLATE: ("DynamicResourceAllocationUnavailable",
                     "claims its accelerators with Dynamic Resource Allocation "
                     "(resources.allocation: dra), and this cluster does not serve "
                     "resource.k8s.io/v1 ResourceClaimTemplates (Kubernetes 1.34 or later): "
                     "upgrade, or use allocation device-plugin"),
}


async def mounted(settings: Settings, view: ClusterView, model: LLMModel
                  ) -> tuple[Settings, Blocker | None]:
    """Settings with modelImages.mount concrete for the nodes that may run a model image.

    With the blocker when image volumes were asked for and no such node can mount one.
    """
    source = model.spec.model_source
    if model.spec.is_remote or source is None or source.type != "oci" \
            or settings.model_images.mount in ("modelcar", "pull"):
        return settings, None
    choice = image_mounts.choose(settings.model_images.mount, await view.nodes(),
                                 pod_node_selector(model.spec, settings))
    blocker = Blocker("ImageVolumeUnsupported", choice.problem) if choice.problem else None
    return image_mounts.with_mount(settings, choice.mode), blocker


def resolved(settings: Settings, view: ClusterView) -> Settings:
    """Settings with disaggregation.workload auto made concrete for this cluster."""
    if settings.disaggregation.workload != "auto":
        return settings
    chosen = "disaggregatedset" if view.serves(*workloads.DS_REF) else "deployments"
    return settings.model_copy(update={"disaggregation": settings.disaggregation.model_copy(
        update={"workload": chosen})})




class ClusterView(Protocol):
    """Where a reconcile reads the cluster from: the operator's watch caches, or the API.

    ``children`` answers None, and ``serves`` False, when the kind is not served (its CRD
    is not installed: no KEDA, no Prometheus-Operator).
    ``stored`` hands back what a write returned, ``removed`` what a delete removed, so a
    cache is current before the watch event arrives.
    """

    async def child(self, api_version: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None: ...

    async def children(self, api_version: str, kind: str, namespace: str,
                       labels: dict[str, str]) -> list[dict[str, Any]] | None: ...

    def serves(self, api_version: str, kind: str) -> bool: ...

    def stored(self, obj: dict[str, Any]) -> None: ...

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None: ...

    async def nodes(self) -> list[dict[str, Any]] | None:
        """The cluster's nodes; None where they cannot be read."""
        ...


@dataclass
class DirectView:
    """A ClusterView that asks the API server every time (tests, one-off reconciles)."""

    kube: Kube

    async def child(self, api_version: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None:
        return await self.kube.get(api_version, PLURALS[(api_version, kind)], namespace, name)

    async def children(self, api_version: str, kind: str, namespace: str,
                       labels: dict[str, str]) -> list[dict[str, Any]] | None:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        try:
            return await self.kube.list(api_version, PLURALS[(api_version, kind)], namespace,
                                        selector)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def serves(self, api_version: str, kind: str) -> bool:
        return True  # an apply of a kind that is not served answers 404: skipped then

    def stored(self, obj: dict[str, Any]) -> None:
        return None

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        return None

    async def nodes(self) -> list[dict[str, Any]] | None:
        try:
            return await self.kube.list("v1", "nodes", None)
        except ApiError as exc:
            if exc.status in (401, 403, 404):  # not allowed to read them, or not served
                return None
            raise


@dataclass
class Outcome:
    """What one reconcile did (for logs, metrics and tests)."""

    applied: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # why each child was applied
    skipped: list[str] = field(default_factory=list)  # children whose kind is not served
    pruned: list[str] = field(default_factory=list)
    phase: str | None = None
    events: list[Event] = field(default_factory=list)
    status_written: bool = False
    waiting_for_reference: bool = False  # a Secret or judge model it needs is missing: soon
    recheck_after: float | None = None  # look again then (a registration's Lease lapses)
    namespace_terminating: bool = False  # left alone: its namespace is being deleted
    labels_written: bool = False
    model: LLMModel | None = None  # the model with its new status


EXPIRED_RECHECK_SECONDS = 5.0  # a withdrawn registration: is its machine back?


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def owner_labels(model: LLMModel) -> dict[str, str]:
    return {L.MODEL_NAME: model.name, L.K8S_MANAGED_BY: L.MANAGED_BY_VALUE}


async def _registration(kube: Kube, model: LLMModel, outcome: Outcome) -> Blocker | None:
    """A model `llmop up --register` published is served while its machine renews its Lease.

    Returns the blocker once the Lease has lapsed (or is gone), looking again every few
    seconds; else schedules a look at the moment it would lapse.
    """
    lease = (model.metadata.labels or {}).get(L.REGISTERED_BY)
    if not lease:
        return None
    found = await kube.get("coordination.k8s.io/v1", "leases", model.namespace, lease)
    left = lease_left(found, datetime.datetime.now(tz=datetime.UTC))
    if left is not None:
        outcome.recheck_after = left + 1
        return None
    outcome.recheck_after = EXPIRED_RECHECK_SECONDS  # the machine may come back
    renewed = ((found or {}).get("spec") or {}).get("renewTime")
    since = f"has not renewed its Lease {lease} since {renewed}" if renewed else \
        f"has no Lease {lease}"
    return Blocker("RegistrationExpired", f"the machine that registered this model {since}: "
                   "it is not served until `llmop up --register` runs there again")


# Blockers that another object's creation lifts: the model looks again soon, not at resync.
RECHECKED = ("SecretMissing", "JudgeMissing")


async def _blockers(kube: Kube, model: LLMModel, problems: list[Problem]) -> list[Blocker]:
    blockers = [Blocker.from_problem(p) for p in problems]
    for name, key, path in required_secrets(model):
        secret = await kube.get("v1", "secrets", model.namespace, name)
        if secret is None or key not in (secret.get("data") or {}):
            blockers.append(Blocker.secret_missing(name, key, path))
    if model.spec.guardrails is not None and any(
            g.asked_model for g in model.spec.guardrails.every_guard):
        known = declared_in(await kube.list(API_VERSION, "llmmodels", None))
        blockers += [Blocker.judge_missing(p)
                     for p in unknown_guard_models(model, known, "in the cluster")]
    return blockers


async def _apply_children(kube: Kube, view: ClusterView, desired: list[dict[str, Any]],
                          outcome: Outcome, tracer: Tracer) -> None:
    for obj in desired:
        meta, what = obj["metadata"], f"{obj['kind']}/{obj['metadata']['name']}"
        if not view.serves(obj["apiVersion"], obj["kind"]):
            outcome.skipped.append(what)  # e.g. a ScaledObject on a cluster without KEDA
            continue
        current = await view.child(obj["apiVersion"], obj["kind"], meta["namespace"],
                                   meta["name"])
        reason = "it does not exist" if current is None else drift(obj, current, FIELD_MANAGER)
        if reason is None:
            continue  # every field we render is ours and as rendered: no write
        try:
            with tracer.start_as_current_span(f"apply {what}", attributes={
                    "k8s.kind": obj["kind"], "k8s.namespace.name": meta["namespace"],
                    "k8s.name": meta["name"], "llmop.apply.reason": reason}):
                view.stored(await kube.apply(obj))
        except ApiError as exc:
            if exc.status != 404 or current is not None:
                raise
            outcome.skipped.append(what)  # the kind went away since the caches looked
            continue
        outcome.applied.append(what)
        outcome.reasons.append(f"{obj['kind']}/{meta['name']}: {reason}")


async def _prune(kube: Kube, view: ClusterView, model: LLMModel, desired: list[dict[str, Any]],
                 outcome: Outcome) -> None:
    wanted = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in desired}
    for api, kind in CHILD_KINDS:
        existing = await view.children(api, kind, model.namespace, owner_labels(model))
        for obj in existing or ():  # None: the kind is not installed (e.g. no KEDA)
            name = obj["metadata"]["name"]
            if (api, kind, name) not in wanted:
                await kube.delete(api, PLURALS[(api, kind)], model.namespace, name)
                view.removed(api, kind, model.namespace, name)
                outcome.pruned.append(f"{kind}/{name}")


async def _observe(view: ClusterView, model: LLMModel) -> tuple[
        dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """The model's workload (see _workload), its pods, and its prefetch pods."""
    pods = await view.children("v1", "Pod", model.namespace, {L.MODEL_NAME: model.name})
    prefetching = await view.children(*PREFETCH_POD_KIND, model.namespace,
                                      {L.PREFETCH_FOR: model.name})
    return await _workload(view, model), pods or [], prefetching or []


async def _observe_pool(view: ClusterView, model: LLMModel) -> tuple[
        dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """A pool member's workload: its pool's Deployment, and the pool's pods."""
    assert model.spec.pool is not None
    name = pool_object_name(model.spec.pool.name)
    found = await view.child(*workloads.DEPLOYMENT_REF, model.namespace, name)
    pods = await view.children("v1", "Pod", model.namespace, pool_labels(model.spec.pool.name))
    live = [(workloads.DEPLOYMENT, found)] if found is not None else []
    return workloads.summary(live, name), pods or [], []


async def _workload(view: ClusterView, model: LLMModel) -> dict[str, Any] | None:
    """What serves the model, summed up for status (reconcile/workloads.summary)."""
    live = [(ref[1], obj) for ref, place in workloads.places(model.name)
            if (obj := await view.child(*ref, model.namespace, place)) is not None]
    return workloads.summary(live, model.name)


def _missing_kinds(view: ClusterView, desired: list[dict[str, Any]], nodes: int
                   ) -> list[Blocker]:
    """A workload (or claim) whose kind the cluster does not serve: it cannot be served."""
    return [Blocker(reason, message.format(nodes=nodes))
            for (api, kind), (reason, message) in REQUIRED_KINDS.items()
            if any(o["apiVersion"] == api and o["kind"] == kind for o in desired)
            and not view.serves(api, kind)]


PRIORITY_CLASS = ("scheduling.k8s.io/v1", "PriorityClass")


def _priority_classes(obj: Any) -> set[str]:
    """Every priorityClassName in a rendered object's pod templates."""
    if isinstance(obj, dict):
        found = {str(v) for k, v in obj.items() if k == "priorityClassName"}
        return found.union(*(_priority_classes(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(_priority_classes(v) for v in obj))
    return set()


async def _missing_priority_classes(view: ClusterView, desired: list[dict[str, Any]]
                                    ) -> list[Blocker]:
    """A PriorityClass the pods would name that the cluster lacks: nothing is created.

    Without it the ReplicaSet's pods are refused one by one ("no PriorityClass with name
    ... was found") while the rest of the model's objects stand half-made.
    """
    if not view.serves(*PRIORITY_CLASS):
        return []
    return [Blocker("PriorityClassNotFound", f"the PriorityClass {name} that the model's pods "
                    "name does not exist in this cluster: install the operator's classes "
                    "(kubectl apply -k config/priority), or set the operator setting "
                    "scheduling.priorityClasses: false")
            for name in sorted(set().union(*(_priority_classes(o) for o in desired)))
            if await view.child(*PRIORITY_CLASS, "", name) is None]


async def record_events(kube: Kube, model: LLMModel, events: list[Event]) -> None:
    for event in events:
        stamp = now()
        await kube.request("POST", f"/api/v1/namespaces/{model.namespace}/events", body={
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{model.name}.{uuid.uuid4().hex[:12]}",
                         "namespace": model.namespace},
            "involvedObject": {"apiVersion": API_VERSION, "kind": "LLMModel",
                               "name": model.name, "namespace": model.namespace,
                               "uid": model.metadata.uid},
            "type": event.type, "reason": event.reason, "message": event.message[:1024],
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "source": {"component": "llm-operator"},
        })


Usage = tuple[int | None, int | None]  # (requestsPerMinute, averageLatencyMs)
# What a queued model does not get until the GPU queue admits it (no pod waits Pending).
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet", "DisaggregatedSet",
                            "ScaledObject", "HTTPScaledObject"})


async def _member_said(
        kube: Kube, model: LLMModel,
        pool_state: Callable[[LLMModel], Awaitable[tuple[str, str | None] | None]]
) -> tuple[str | None, str | None]:
    """A pool member's state in its pool's engine, and why it failed to load (if it did).

    The reason the engine gave, else the one its pod's log holds.
    """
    member, reason = await pool_state(model) or (None, None)
    if member == "failed" and reason is None:
        reason = await load_failure(kube, model)
    return member, reason


async def reconcile(kube: Kube, doc: dict[str, Any], settings: Settings, *,
                    view: ClusterView | None = None,
                    usage: Callable[[LLMModel], Awaitable[Usage]] | None = None,
                    admission: Callable[[LLMModel], Admission | None] | None = None,
                    scaling: Callable[[LLMModel], Report | None] | None = None,
                    pool_state: Callable[[LLMModel], Awaitable[tuple[str, str | None] | None]]
                    | None = None,
                    tracer: Tracer | None = None) -> Outcome:
    """Bring one model's children, labels and status in line with its spec.

    A model that cannot be placed gets phase Failed with the reasons and no new workload
    (existing children are left as they are). A model the GPU queue (``admission``) does not
    admit yet gets everything but its workload, and phase WaitingForGPU. Reads come from
    ``view`` (the API itself when None); unchanged state costs no write. A document the CRD
    should have refused raises InvalidModel (the caller reports it). Each write of a child
    is a span of ``tracer`` (docs/tracing.md).
    """
    view = view or DirectView(kube)
    outcome = Outcome()
    model = parse_llmmodel(doc)
    meta = doc["metadata"]
    patch = L.reconcile_labels(meta.get("labels") or {}, model.spec)
    if patch:
        view.stored(await kube.merge_patch(API_VERSION, "llmmodels", model.namespace,
                                           model.name, body={"metadata": {"labels": patch}}))
        outcome.labels_written = True

    model_plan = plan(model, settings.storage.min_size_gi_b)
    blockers = await _blockers(kube, model, placement_problems(model, settings, model_plan))
    expired = await _registration(kube, model, outcome)
    if expired is not None:
        blockers.append(expired)
    outcome.waiting_for_reference = any(b.reason in RECHECKED for b in blockers)
    queued = None
    if model.spec.needs_accelerators and not blockers and admission is not None \
            and await _workload(view, model) is None:
        verdict = admission(model)  # a model with a workload holds its place: never queued
        queued = verdict if verdict is not None and not verdict.admitted else None
    pooled = model.spec.pool is not None and not model.spec.is_remote
    members: list[LLMModel] = []
    if pooled and not blockers:  # the pool's engine serves it (operator/pooled.py)
        blockers, desired, members = await pool_desired(kube, model, settings)
        outcome.recheck_after = POOL_RECHECK_SECONDS  # its siblings may change the pool
    elif not blockers:
        settings, unmountable = await mounted(settings, view, model)
        blockers += [unmountable] if unmountable else []
    if not blockers and not pooled:
        desired = render(model, resolved(settings, view), owner_uid=meta.get("uid"))
        blockers = _missing_kinds(view, desired, model_plan.nodes) \
            + await _missing_priority_classes(view, desired)
    if not blockers:
        if queued is not None:
            desired = [o for o in desired if o["kind"] not in WORKLOAD_KINDS]
        await _apply_children(kube, view, desired, outcome, tracer or NoOpTracer())
        # a member's own children (from before it joined) go; the pool's are no member's
        await _prune(kube, view, model, own_claims(model, settings) if pooled else desired,
                     outcome)
    deployment, pods, prefetching = (None, [], []) if blockers else \
        await _observe_pool(view, model) if pooled else await _observe(view, model)
    metrics = await usage(model) if usage is not None else (None, None)
    member, member_error = await _member_said(kube, model, pool_state) \
        if pooled and not blockers and pool_state else (None, None)
    observation = Observation(
        deployment=deployment, pods=pods, prefetch_pods=prefetching, blockers=blockers,
        plan_verdict=model_plan.verdict,
        plan_reason=model_plan.reason,
        scaled_to_zero_allowed=pool_scaling(members).min_replicas == 0 if members else
        autoscaled(model) and model.spec.scaling.min_replicas == 0,
        requests_per_minute=metrics[0], average_latency_ms=metrics[1], queued=queued,
        scaling=scaling(model) if scaling is not None else None, pool_member=member,
        pool_member_error=member_error)
    update = compute_status(model, observation, pool_endpoint(model, settings) if pooled
                            else endpoint(model, settings), now())
    outcome.phase = update.status.phase
    outcome.model = model.model_copy(update={"status": update.status})
    if update.changed:
        view.stored(await kube.merge_patch(API_VERSION, "llmmodels", model.namespace,
                                           model.name, body={"status": update.patch()},
                                           subresource="status"))
        outcome.status_written = True
    if update.events:
        await record_events(kube, model, update.events)
        outcome.events = update.events
    return outcome
