"""The rules of resources.gpuSharing: MIG instances and time-slicing (CEL and Python)."""

from __future__ import annotations

from llm_operator.api.mig import MIG_CARDS, card_cel, profile_fits_card
from llm_operator.api.rule import VENDOR, Rule, is_local
from llm_operator.api.serving_rules import DISAGGREGATED, NODES_ASKED, asked_nodes
from llm_operator.api.v1alpha1 import LLMModelSpec, ResourcesSpec

SHARING = "(has(self.resources) && has(self.resources.gpuSharing))"
MIG = f"({SHARING} && has(self.resources.gpuSharing.migProfile))"
COUNT = "(has(self.resources.acceleratorCount) ? self.resources.acceleratorCount : 1)"


def mig_profile(spec: LLMModelSpec) -> str | None:
    sharing = spec.resources.gpu_sharing
    return sharing.mig_profile if sharing else None


def _one_instance(spec: LLMModelSpec) -> bool:
    return spec.resources.accelerator_count == 1 and asked_nodes(spec) == 1 and not (
        spec.serving and spec.serving.disaggregation is not None)


def _profile_of_card(resources: ResourcesSpec) -> bool:
    sharing = resources.gpu_sharing
    return sharing is None or sharing.mig_profile is None or profile_fits_card(
        sharing.mig_profile, resources.preferred_accelerator_model)


GPU_RULES: tuple[Rule, ...] = (
    Rule(
        id="gpu-sharing-on-nvidia",
        location="spec",
        field=".resources.gpuSharing",
        cel=f"self.deploymentMode != 'local' || !{SHARING} || {VENDOR} == 'nvidia'",
        message="resources.gpuSharing (MIG instances, time-slicing) is NVIDIA's: remove it, "
        "or set acceleratorVendor nvidia",
        holds=lambda s: not is_local(s) or s.resources.gpu_sharing is None
        or s.accelerator_vendor == "nvidia",
    ),
    Rule(
        id="mig-or-time-sliced",
        location="spec.resources.gpuSharing",
        field=".migProfile",
        cel="!has(self.migProfile) || !has(self.timeSliced) || !self.timeSliced",
        message="gpuSharing: a MIG instance is not time-sliced: set migProfile or "
        "timeSliced, not both",
        holds=lambda g: g.mig_profile is None or not g.time_sliced,
    ),
    Rule(
        id="mig-one-instance",
        location="spec",
        field=".resources.gpuSharing.migProfile",
        cel=f"!{MIG} || ({COUNT} == 1 && !{NODES_ASKED} && !{DISAGGREGATED})",
        message="a model on a MIG instance takes one (resources.acceleratorCount: 1, one "
        "node, no prefill/decode roles): a CUDA process uses one MIG instance; pick a larger "
        "profile, or whole GPUs",
        holds=lambda s: mig_profile(s) is None or _one_instance(s),
    ),
    Rule(
        id="mig-profile-of-card",
        location="spec.resources",
        field=".gpuSharing.migProfile",
        cel="!has(self.gpuSharing) || !has(self.gpuSharing.migProfile) || "
        "(has(self.preferredAcceleratorModel) && "
        f"{card_cel('self.preferredAcceleratorModel', 'self.gpuSharing.migProfile')})",
        message="gpuSharing.migProfile must be a MIG profile of the card that "
        "preferredAcceleratorModel names (" + ", ".join(c.name for c in MIG_CARDS) +
        "): docs/scheduling.md lists each card's profiles",
        holds=_profile_of_card,
    ),
)


def _dra(spec: LLMModelSpec) -> bool:
    return is_local(spec) and spec.resources.allocation == "dra"


DRA = "(has(self.resources) && has(self.resources.allocation) && " \
    "self.resources.allocation == 'dra')"

DRA_RULES: tuple[Rule, ...] = (
    Rule(
        id="dra-on-accelerators",
        location="spec",
        field=".resources.allocation",
        cel=f"self.deploymentMode != 'local' || !{DRA} || {VENDOR} != 'cpu'",
        message="resources.allocation dra claims accelerators: acceleratorVendor cpu has none "
        "to claim; use allocation device-plugin",
        holds=lambda s: not (_dra(s) and s.accelerator_vendor == "cpu"),
    ),
    Rule(
        id="dra-without-gpu-sharing",
        location="spec",
        field=".resources.gpuSharing",
        cel=f"!{DRA} || !{SHARING}",
        message="resources.gpuSharing is the device plugin's (MIG resources, time-slicing); "
        "with allocation dra the device class decides what a device is: remove gpuSharing, "
        "or use allocation device-plugin",
        holds=lambda s: not (s.resources.allocation == "dra"
                             and s.resources.gpu_sharing is not None),
    ),
    Rule(
        id="dra-without-roles",
        location="spec",
        field=".resources.allocation",
        cel=f"!{DRA} || !{DISAGGREGATED}",
        message="resources.allocation dra serves whole replicas, not prefill/decode roles "
        "(each role would need its own claim): remove serving.disaggregation, or use "
        "allocation device-plugin",
        holds=lambda s: not (s.resources.allocation == "dra" and s.serving is not None
                             and s.serving.disaggregation is not None),
    ),
)
