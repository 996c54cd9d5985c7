"""Dynamic Resource Allocation: a model's ResourceClaimTemplate, and its pods' claim on it."""

from __future__ import annotations

import math
import re
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.profiles.planner import Plan, utilization
from llm_operator.profiles.settings import DeviceClass, Settings
from llm_operator.render.meta import metadata

API_VERSION, KIND = "resource.k8s.io/v1", "ResourceClaimTemplate"
CLAIM = "accelerators"  # the pod's claim and the template's one request


def claimed(spec: LLMModelSpec) -> bool:
    """The pods get their accelerators from a ResourceClaim (resources.allocation: dra)."""
    return spec.needs_accelerators and spec.resources.allocation == "dra"


def template_name(model: LLMModel) -> str:
    return f"{model.name}-{CLAIM}"


def device_class(spec: LLMModelSpec, settings: Settings) -> DeviceClass | None:
    return settings.dra.device_classes.get(spec.accelerator_vendor)


def memory_floor_gib(spec: LLMModelSpec, model_plan: Plan) -> int:
    """Each device's memory, at least.

    The planner's need shared by the replica's devices, at the engine's memory share; or
    the declared vramPerAcceleratorGiB when larger.
    """
    devices = max(1, spec.resources.accelerator_count) * max(1, model_plan.nodes)
    need = model_plan.estimate.total_gib if model_plan.estimate else 0.0
    floor = math.ceil(need / devices / utilization(spec)) if need else 1
    return max(floor, spec.resources.vram_per_accelerator_gi_b or 0)


def selectors(spec: LLMModelSpec, model_plan: Plan, dc: DeviceClass) -> list[dict[str, Any]]:
    """CEL over each device: enough memory, and the named card (its words in order)."""
    floor = memory_floor_gib(spec, model_plan)
    found = [f"device.capacity['{dc.driver}'].{dc.memory_capacity}"
             f".compareTo(quantity('{floor}Gi')) >= 0"]
    card = spec.resources.preferred_accelerator_model
    words = re.findall(r"[A-Za-z0-9]+", card or "")
    if dc.product_attribute and words:
        found.append(f"device.attributes['{dc.driver}'].{dc.product_attribute}"
                     f".matches('(?i){'.*'.join(words)}')")
    return [{"cel": {"expression": e}} for e in found]


def resource_claim_template(model: LLMModel, settings: Settings, model_plan: Plan,
                            component: str, owner_uid: str | None) -> dict[str, Any]:
    spec = model.spec
    dc = device_class(spec, settings)
    assert dc is not None  # placement_problems() checked it
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata(model, template_name(model), component, owner_uid),
        "spec": {"spec": {"devices": {"requests": [{
            "name": CLAIM,
            "exactly": {
                "deviceClassName": dc.name,
                "allocationMode": "ExactCount",
                "count": max(1, spec.resources.accelerator_count),
                "selectors": selectors(spec, model_plan, dc),
            },
        }]}}},
    }


def pod_claims(model: LLMModel) -> list[dict[str, Any]]:
    """The pod's resourceClaims: one claim per pod, made from the model's template."""
    return [{"name": CLAIM, "resourceClaimTemplateName": template_name(model)}]
