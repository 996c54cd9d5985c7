"""Pure, deterministic rendering: one LLMModel -> the Kubernetes objects that serve it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_operator.api.serving import ROLES
from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.api.validation import Problem
from llm_operator.profiles.engines import engine, engine_arg_problems
from llm_operator.profiles.planner import Plan, plan
from llm_operator.profiles.settings import DEFAULT_SETTINGS, Settings
from llm_operator.profiles.vendors import VendorProfile, vendor
from llm_operator.render import (
    accelerators,
    adapters,
    claims,
    disaggregation,
    disruption,
    monitoring,
    multinode,
    networking,
    picker,
    pools,
    prefetch,
    remote,
    scaling,
    weights,
    workload,
)


class RenderError(ValueError):
    """The model cannot be placed or served as specified; every problem says what to change."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def engine_image(vp: VendorProfile, engine_name: str, settings: Settings) -> str | None:
    """The engine image for a vendor, after settings overrides (mirrors, air-gapped)."""
    override = settings.images.engines.get(vp.name, {}).get(engine_name)
    return override or vp.image_for(engine_name)


def placement_problems(model: LLMModel, settings: Settings, model_plan: Plan) -> list[Problem]:
    """Why this valid model cannot be placed: planner verdict, engine and scaling limits."""
    spec = model.spec
    if spec.is_remote:
        return []
    problems = [Problem("spec.engineArgs", msg) for msg in engine_arg_problems(spec)]
    problems += [Problem("spec.loraAdapters", f"adapter {a.name}: source type file names "
                         "an adapter on one machine, which a cluster cannot reach: serve it "
                         "with `llmop up`, or use huggingface, s3, oci or pvc")
                 for a in spec.lora_adapters or () if a.source.type == "file"]
    problems += weights.node_file_problems(spec)
    vp = vendor(spec.accelerator_vendor)
    if engine_image(vp, spec.inference_engine, settings) is None:
        reason = vp.unsupported_reason.get(spec.inference_engine, "no image configured")
        problems.append(Problem("spec.inferenceEngine", reason))
    if model_plan.verdict == "does-not-fit":
        problems.append(Problem(model_plan.field, model_plan.reason))
    if claims.claimed(spec) and claims.device_class(spec, settings) is None:
        problems.append(Problem("spec.resources.allocation", (
            f"dra: no device class is configured for acceleratorVendor {vp.name}: set the "
            f"operator setting dra.deviceClasses.{vp.name} (its DRA driver's DeviceClass), "
            "or use allocation device-plugin")))
    if scaling.autoscaled(model) and spec.scaling.min_replicas == 0 \
            and not settings.router.enabled:
        if settings.autoscaler == "builtin":
            problems.append(Problem(
                "spec.scaling.minReplicas",
                "0 (scale-to-zero) needs the router (settings router.enabled): the built-in "
                "autoscaler wakes a model when the router holds a request for it: set "
                "minReplicas >= 1, or enable router"))
        elif not settings.keda.http_addon.enabled:
            problems.append(Problem(
                "spec.scaling.minReplicas",
                "0 (scale-to-zero) needs the router (settings router.enabled) or the KEDA "
                "HTTP add-on to wake the model on a request, and both are off in the operator "
                "settings: set minReplicas >= 1, or enable router or keda.httpAddon"))
    return problems


def render(
    model: LLMModel, settings: Settings = DEFAULT_SETTINGS, owner_uid: str | None = None
) -> list[dict[str, Any]]:
    """Every child object of ``model``, in apply order. Raises RenderError if unplaceable."""
    model_plan = plan(model, settings.storage.min_size_gi_b)
    problems = placement_problems(model, settings, model_plan)
    if problems:
        raise RenderError(problems)
    if model.spec.is_remote:
        return _render_remote(model, settings, owner_uid)
    return _render_local(model, settings, owner_uid, model_plan)


def _render_remote(
    model: LLMModel, settings: Settings, owner_uid: str | None
) -> list[dict[str, Any]]:
    config = remote.config_map(model, settings, owner_uid)
    gateway = remote.gateway_deployment(model, config, settings, owner_uid)
    objects = [
        config,
        gateway,
        networking.service(model, remote.COMPONENT, owner_uid),
        *disruption.budgets(model, [gateway], remote.COMPONENT, owner_uid,
                            most=settings.gateway.replicas),
    ]
    if settings.gateway.network_policy:
        objects.append(remote.network_policy(model, owner_uid, settings))
    mon = monitoring.monitor(model, remote.COMPONENT, "/metrics", settings, owner_uid)
    return objects + ([mon] if mon else [])


@dataclass(frozen=True)
class _Layout:
    """How a local model's pods are laid out, and what that decides for its other objects."""

    workloads: list[dict[str, Any]]  # a Deployment, a LeaderWorkerSet, or the two roles
    serving: dict[str, str] | None = None  # more labels of the pods the Service reaches
    pooled: dict[str, str] | None = None  # more labels of the pods the InferencePool holds
    target: tuple[str, str] = scaling.DEPLOYMENT  # what KEDA scales
    shared_cache: bool = True  # one model-cache PVC (a group's pods claim their own)
    roles: bool = False


def _layout(model: LLMModel, settings: Settings, *, nodes: int, cache: int,
            owner_uid: str | None,
            deployment_of: Callable[[LLMModel], dict[str, Any]]) -> _Layout:
    """What serves the model: its Deployment, a LeaderWorkerSet, or prefill and decode roles."""
    if model.spec.serving and model.spec.serving.disaggregation:
        roles = [disaggregation.role_deployment(
            model, role, deployment_of(disaggregation.role_model(model, role)), settings)
            for role in ROLES]
        if settings.disaggregation.workload == "disaggregatedset":
            roles = [disaggregation.disaggregated_set(model, roles, owner_uid)]
        return _Layout(roles, serving=disaggregation.DECODE_ONLY, roles=True)
    if nodes > 1:
        return _Layout([multinode.leader_worker_set(
            model, deployment_of(model), nodes, cache, settings.storage)],
            serving=multinode.LEADERS, pooled=multinode.LEADERS, target=multinode.REF,
            shared_cache=False)
    return _Layout([deployment_of(model)])


def pod_node_selector(spec: LLMModelSpec, settings: Settings) -> dict[str, str]:
    """The inference pods' nodeSelector: the vendor's, or the settings' override of it.

    None of the vendor's with a DRA claim: the devices it is allocated decide the node
    (a DRA driver's nodes need not carry the device plugin's labels).
    """
    override = settings.vendors.get(spec.accelerator_vendor)
    if override and override.node_selector is not None:
        return dict(override.node_selector)
    return {} if claims.claimed(spec) else dict(vendor(spec.accelerator_vendor).node_selector)


def pod_tolerations(spec: LLMModelSpec, settings: Settings) -> list[dict[str, Any]]:
    """The inference pods' tolerations: the vendor's, or the settings' override of them."""
    override = settings.vendors.get(spec.accelerator_vendor)
    if override and override.tolerations is not None:
        return list(override.tolerations)
    return [dict(t) for t in vendor(spec.accelerator_vendor).tolerations]


def _render_local(
    model: LLMModel, settings: Settings, owner_uid: str | None, model_plan: Plan
) -> list[dict[str, Any]]:
    spec = model.spec
    vp = vendor(spec.accelerator_vendor)
    eng = engine(spec.inference_engine)
    image = engine_image(vp, eng.name, settings)
    assert image is not None  # placement_problems() checked it
    node_selector = pod_node_selector(spec, settings)
    tolerations = pod_tolerations(spec, settings)
    cache = model_plan.cache_size_gib * (2 if eng.name == "ollama" else 1)  # Ollama copies it
    autoscaled = scaling.autoscaled(model)

    def deployment_of(served_model: LLMModel) -> dict[str, Any]:
        return workload.inference_deployment(
            served_model, vp=vp, eng=eng, image=image, settings=settings,
            replicas=None if autoscaled else spec.scaling.min_replicas,
            owner_uid=owner_uid, node_selector=node_selector, tolerations=tolerations)

    layout = _layout(model, settings, nodes=model_plan.nodes, cache=cache,
                     owner_uid=owner_uid, deployment_of=deployment_of)
    cached = layout.shared_cache and weights.downloads(spec, settings)
    objects = [
        *([workload.model_cache_pvc(model, cache, settings, owner_uid)] if cached else []),
        *([adapters.config_map(model, workload.COMPONENT, owner_uid)]
          if adapters.synced(spec) else []),
        *([claims.resource_claim_template(model, settings, model_plan, workload.COMPONENT,
                                          owner_uid)] if claims.claimed(spec) else []),
        *layout.workloads,
        networking.service(model, workload.COMPONENT, owner_uid, layout.serving),
        *disruption.budgets(model, layout.workloads, workload.COMPONENT, owner_uid,
                            most=spec.scaling.max_replicas),
    ]
    if spec.scaling.prefetch_images:
        objects.append(prefetch.daemon_set(
            model, engine_image=image, settings=settings, node_selector=node_selector,
            tolerations=tolerations, owner_uid=owner_uid,
            affinity=accelerators.affinity(spec, vp, settings) if vp.resource_key else None))
    if scaling.keda_scales(model, settings):
        objects.append(scaling.scaled_object(model, eng, settings, owner_uid, layout.target))
    if scaling.wants_http_addon(model, settings):
        objects.append(scaling.http_scaled_object(model, settings, owner_uid, layout.target))
    if eng.metrics_path:
        mon = disaggregation.pod_monitor(model, settings, eng.metrics_path, owner_uid) \
            if layout.roles else \
            monitoring.monitor(model, workload.COMPONENT, eng.metrics_path, settings, owner_uid)
        if mon:
            objects.append(mon)
    if settings.inference_pool.enabled and eng.name in pools.POOL_ENGINES:
        if settings.inference_pool.endpoint_picker.deploy:
            objects += picker.picker_objects(model, settings, owner_uid)
        objects += [pools.inference_pool(model, settings, owner_uid, layout.pooled),
                    pools.http_route(model, settings, owner_uid)]
    return objects
