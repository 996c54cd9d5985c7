"""One reconcile of one LLMModel: place, apply, prune, label, observe, report (thin I/O)."""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import API_VERSION, LLMModel
from llm_operator.api.validation import Problem, parse_llmmodel
from llm_operator.kube import PLURALS, ApiError, Kube, plural_of
from llm_operator.profiles.planner import plan
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile.status import Blocker, Event, Observation, compute_status
from llm_operator.render import placement_problems, render
from llm_operator.render.networking import endpoint
from llm_operator.render.scaling import autoscaled

# Kinds the operator may have created for a model, checked when pruning.
CHILD_KINDS = (
    ("v1", "PersistentVolumeClaim"), ("v1", "ConfigMap"), ("apps/v1", "Deployment"),
    ("v1", "Service"), ("keda.sh/v1alpha1", "ScaledObject"),
    ("http.keda.sh/v1alpha1", "HTTPScaledObject"), ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
)


@dataclass
class Outcome:
    """What one reconcile did (for logs, metrics and tests)."""

    applied: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    phase: str | None = None
    events: list[Event] = field(default_factory=list)
    status_written: bool = False
    labels_written: bool = False
    model: LLMModel | None = None  # the model with its new status


def now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def subset(desired: Any, current: Any) -> bool:
    """Whether ``current`` already holds everything ``desired`` says (server defaults aside)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(
            k in current and subset(v, current[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(current, list) and len(desired) == len(current) and all(
            subset(d, c) for d, c in zip(desired, current, strict=True))
    return bool(desired == current)


def required_secrets(model: LLMModel) -> list[tuple[str, str, str]]:
    """(Secret name, key, field path) the model's pods cannot start without."""
    spec, out = model.spec, []
    if spec.is_remote and spec.remote_api:
        out.append((spec.remote_api.api_key_secret, "apiKey", "spec.remoteApi.apiKeySecret"))
    source = spec.model_source
    if not spec.is_remote and source is not None:
        if source.hugging_face_token_secret:
            out.append((source.hugging_face_token_secret, "token",
                        "spec.modelSource.huggingFaceTokenSecret"))
        if source.s3_credentials_secret:
            out.append((source.s3_credentials_secret, "AWS_ACCESS_KEY_ID",
                        "spec.modelSource.s3CredentialsSecret"))
    return out


def owner_selector(model: LLMModel) -> str:
    return f"{L.MODEL_NAME}={model.name},{L.K8S_MANAGED_BY}={L.MANAGED_BY_VALUE}"


async def _blockers(kube: Kube, model: LLMModel, problems: list[Problem]) -> list[Blocker]:
    blockers = [Blocker.from_problem(p) for p in problems]
    for name, key, path in required_secrets(model):
        secret = await kube.get("v1", "secrets", model.namespace, name)
        if secret is None or key not in (secret.get("data") or {}):
            blockers.append(Blocker.secret_missing(name, key, path))
    return blockers


async def _apply_children(kube: Kube, model: LLMModel, desired: list[dict[str, Any]],
                          outcome: Outcome) -> None:
    for obj in desired:
        meta = obj["metadata"]
        current = await kube.get(obj["apiVersion"], plural_of(obj), meta["namespace"],
                                 meta["name"])
        if current is not None and subset(obj, current):
            continue  # already as desired: no write
        await kube.apply(obj)
        outcome.applied.append(f"{obj['kind']}/{meta['name']}")


async def _prune(kube: Kube, model: LLMModel, desired: list[dict[str, Any]],
                 outcome: Outcome) -> None:
    wanted = {(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in desired}
    for api, kind in CHILD_KINDS:
        plural = PLURALS[(api, kind)]
        try:
            existing = await kube.list(api, plural, model.namespace, owner_selector(model))
        except ApiError as exc:
            if exc.status == 404:  # the kind is not installed (e.g. no KEDA): nothing to prune
                continue
            raise
        for obj in existing:
            name = obj["metadata"]["name"]
            if (api, kind, name) not in wanted:
                await kube.delete(api, plural, model.namespace, name)
                outcome.pruned.append(f"{kind}/{name}")


async def _observe(kube: Kube, model: LLMModel) -> tuple[dict[str, Any] | None,
                                                          list[dict[str, Any]]]:
    deployment = await kube.get("apps/v1", "deployments", model.namespace, model.name)
    pods = await kube.list("v1", "pods", model.namespace, f"{L.MODEL_NAME}={model.name}")
    return deployment, pods


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


async def reconcile(kube: Kube, doc: dict[str, Any], settings: Settings, *,
                    usage: Callable[[LLMModel], Awaitable[Usage]] | None = None,
                    children: bool = True) -> Outcome:
    """Bring one model's children, labels and status in line with its spec.

    A model that cannot be placed gets phase Failed with the reasons and no new workload
    (existing children are left as they are). Unchanged state costs reads only. With
    ``children=False`` only the status is refreshed (a Pod changed: nothing to apply). A
    document the CRD should have refused raises InvalidModel (the caller reports it).
    """
    outcome = Outcome()
    model = parse_llmmodel(doc)
    meta = doc["metadata"]
    patch = L.reconcile_labels(meta.get("labels") or {}, model.spec)
    if patch:
        await kube.merge_patch(API_VERSION, "llmmodels", model.namespace, model.name,
                               body={"metadata": {"labels": patch}})
        outcome.labels_written = True

    model_plan = plan(model, settings.storage.min_size_gi_b)
    blockers = await _blockers(kube, model, placement_problems(model, settings, model_plan))
    if not blockers and children:
        desired = render(model, settings, owner_uid=meta.get("uid"))
        await _apply_children(kube, model, desired, outcome)
        await _prune(kube, model, desired, outcome)
    deployment, pods = (None, []) if blockers else await _observe(kube, model)
    metrics = await usage(model) if usage is not None else (None, None)
    observation = Observation(
        deployment=deployment, pods=pods, blockers=blockers, plan_verdict=model_plan.verdict,
        plan_reason=model_plan.reason,
        scaled_to_zero_allowed=autoscaled(model) and model.spec.scaling.min_replicas == 0,
        requests_per_minute=metrics[0], average_latency_ms=metrics[1])
    update = compute_status(model, observation, endpoint(model, settings), now())
    outcome.phase = update.status.phase
    outcome.model = model.model_copy(update={"status": update.status})
    if update.changed:
        await kube.merge_patch(API_VERSION, "llmmodels", model.namespace, model.name,
                               body={"status": update.patch()}, subresource="status")
        outcome.status_written = True
    if update.events:
        await record_events(kube, model, update.events)
        outcome.events = update.events
    return outcome
