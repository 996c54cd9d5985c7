"""What an inference pod asks of accelerators: the resource (whole, MIG, shared) and its nodes."""

from __future__ import annotations

import re
from typing import Any

from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.profiles.kv_tier import memory_quantity
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.vendors import VendorProfile
from llm_operator.render import claims

# GPU Feature Discovery's label for how a node's GPUs are shared: none, time-slicing or mps.
SHARING_LABEL = "nvidia.com/gpu.sharing-strategy"
SHARED = ["mps", "time-slicing"]


def cpu_quantity(millicores: int) -> str:
    """CPU in the canonical form the API server stores ("8", not "8000m").

    Re-applying an unchanged model then compares equal and writes nothing.
    """
    return str(millicores // 1000) if millicores % 1000 == 0 else f"{millicores}m"


def resource_key(spec: LLMModelSpec, vp: VendorProfile, settings: Settings) -> str | None:
    """The extended resource the pod requests: the vendor's, a MIG instance's, a shared GPU's."""
    sharing = spec.resources.gpu_sharing
    if vp.resource_key is None or sharing is None:
        return vp.resource_key
    if sharing.mig_profile is not None:
        mixed = settings.gpus.mig_strategy == "mixed"
        return f"nvidia.com/mig-{sharing.mig_profile}" if mixed else vp.resource_key
    return settings.gpus.shared_resource if sharing.time_sliced else vp.resource_key


def resources(spec: LLMModelSpec, vp: VendorProfile, settings: Settings) -> dict[str, Any]:
    """CPU and memory, and the accelerators: an extended resource, or the pod's DRA claim.

    Memory is resources.memoryGiB and the host KV tier (profiles/kv_tier.py) on top.
    """
    amounts = {"cpu": cpu_quantity(spec.resources.cpu_millicores),
               "memory": memory_quantity(spec)}  # memoryGiB and the host KV tier
    key = resource_key(spec, vp, settings)
    if key and not claims.claimed(spec):
        amounts[key] = str(spec.resources.accelerator_count)
    out: dict[str, Any] = {"requests": dict(amounts), "limits": dict(amounts)}
    if claims.claimed(spec):
        out["claims"] = [{"name": claims.CLAIM}]
    return out


def product_label_value(model: str) -> str:
    """A card's name as GPU Feature Discovery writes nvidia.com/gpu.product (dashes, <= 63)."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(model.split()))
    return value[:63].strip("-_.")


def affinity(spec: LLMModelSpec, vp: VendorProfile, settings: Settings) -> dict[str, Any] | None:
    """Nodes whose cards fit: memory, a MIG-partitioned product, whether GPUs are shared.

    Required: the declared memory (GFD's nvidia.com/gpu.memory); under the single MIG
    strategy the partitioned product (nvidia.com/gpu.product ending -MIG-<profile>); and no
    time-sliced or MPS-shared GPU unless gpuSharing.timeSliced allows one. Preferred: the
    named card, or with timeSliced the shared GPUs (whole ones stay free for whole models).
    None with a DRA claim.
    """
    if claims.claimed(spec):
        return None  # the claim's selectors choose the devices, and so the node
    sharing = spec.resources.gpu_sharing
    mig = sharing.mig_profile if sharing else None
    time_sliced = bool(sharing and sharing.time_sliced)
    required: list[dict[str, Any]] = []
    vram = spec.resources.vram_per_accelerator_gi_b
    if vp.memory_node_label and vram and mig is None:
        required.append({"key": vp.memory_node_label, "operator": "Gt",
                         "values": [str(vram * 1024 - 1)]})
    preferred_card = spec.resources.preferred_accelerator_model
    single = mig is not None and settings.gpus.mig_strategy == "single"
    if vp.product_node_label and preferred_card and single:
        required.append({"key": vp.product_node_label, "operator": "In", "values": [
            product_label_value(f"{preferred_card}-MIG-{mig}")]})
    if vp.name == "nvidia" and not time_sliced:
        required.append({"key": SHARING_LABEL, "operator": "NotIn", "values": SHARED})
    preferred: list[dict[str, Any]] = []
    if time_sliced:
        preferred.append({"weight": 50, "preference": {"matchExpressions": [
            {"key": SHARING_LABEL, "operator": "In", "values": ["time-slicing"]}]}})
    elif vp.product_node_label and preferred_card and not single:
        preferred.append({"weight": 100, "preference": {"matchExpressions": [
            {"key": vp.product_node_label, "operator": "In",
             "values": [product_label_value(preferred_card)]}]}})
    node: dict[str, Any] = {}
    if required:
        node["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [{"matchExpressions": required}]}
    if preferred:
        node["preferredDuringSchedulingIgnoredDuringExecution"] = preferred
    return {"nodeAffinity": node} if node else None
