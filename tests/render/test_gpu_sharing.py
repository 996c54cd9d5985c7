"""GPU sharing: a MIG instance (mixed or single strategy) or a time-sliced GPU, and the nodes."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render
from llm_operator.render.accelerators import product_label_value

from samples import sample_doc

MIG_SAMPLE = "qwen3-8b-mig-nvidia"
NOT_SHARED = {"key": "nvidia.com/gpu.sharing-strategy", "operator": "NotIn",
              "values": ["mps", "time-slicing"]}


def _pod(doc: dict[str, Any], settings: Settings | None = None) -> dict[str, Any]:
    objects = render(parse_llmmodel(doc), settings or Settings())
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _limits(pod: dict[str, Any]) -> dict[str, str]:
    limits: dict[str, str] = pod["containers"][0]["resources"]["limits"]
    return limits


def _required(pod: dict[str, Any]) -> list[dict[str, Any]]:
    node = pod.get("affinity", {}).get("nodeAffinity", {})
    terms = node.get("requiredDuringSchedulingIgnoredDuringExecution", {}).get(
        "nodeSelectorTerms", [{}])
    expressions: list[dict[str, Any]] = terms[0].get("matchExpressions", [])
    return expressions


def _preferred(pod: dict[str, Any]) -> list[dict[str, Any]]:
    node = pod.get("affinity", {}).get("nodeAffinity", {})
    return [p["preference"]["matchExpressions"][0]
            for p in node.get("preferredDuringSchedulingIgnoredDuringExecution", [])]


@pytest.mark.parametrize(("strategy", "resource", "required", "preferred"), [
    # mixed: the instance is its own resource; the card is only a preference
    ("mixed", "nvidia.com/mig-3g.40gb", [NOT_SHARED],
     [{"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]),
    # single: every GPU of a node is the same instance, found by its product label
    ("single", "nvidia.com/gpu",
     [{"key": "nvidia.com/gpu.product", "operator": "In",
       "values": ["NVIDIA-H100-80GB-HBM3-MIG-3g.40gb"]}, NOT_SHARED], []),
])
def test_a_mig_instance_follows_the_gpu_operators_strategy(
        strategy: str, resource: str, required: list[dict[str, Any]],
        preferred: list[dict[str, Any]]) -> None:
    settings = Settings.model_validate({"gpus": {"migStrategy": strategy}})
    pod = _pod(sample_doc(MIG_SAMPLE), settings)
    assert {k: v for k, v in _limits(pod).items() if k.startswith("nvidia.com/")} == \
        {resource: "1"}
    assert _required(pod) == required
    assert _preferred(pod) == preferred


@pytest.mark.parametrize(("shared_resource", "resource"), [
    ("nvidia.com/gpu", "nvidia.com/gpu"),  # time-slicing that keeps the resource's name
    ("nvidia.com/gpu.shared", "nvidia.com/gpu.shared"),  # renameByDefault: true
])
def test_a_time_sliced_model_may_take_shared_gpus_and_prefers_them(
        shared_resource: str, resource: str) -> None:
    settings = Settings.model_validate({"gpus": {"sharedResource": shared_resource}})
    pod = _pod(sample_doc("gemma3-1b-time-sliced-nvidia"), settings)
    assert {k: v for k, v in _limits(pod).items() if k.startswith("nvidia.com/")} == \
        {resource: "1"}
    assert NOT_SHARED not in _required(pod)
    assert _preferred(pod) == [{"key": "nvidia.com/gpu.sharing-strategy", "operator": "In",
                                "values": ["time-slicing"]}]


@pytest.mark.parametrize("sample", ["gemma4-31b-nvidia", "llama-405b-multinode-nvidia",
                                    "qwen3-32b-sglang-nvidia"])
def test_whole_gpu_models_never_land_on_shared_ones(sample: str) -> None:
    objects = render(parse_llmmodel(sample_doc(sample)), Settings())
    text = str(objects)
    assert str(NOT_SHARED) in text


def test_other_vendors_have_no_sharing_label() -> None:
    assert "sharing-strategy" not in str(render(parse_llmmodel(sample_doc("gemma4-26b-amd")),
                                                Settings()))


@pytest.mark.parametrize(("card", "value"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
    ("  NVIDIA  L40S ", "NVIDIA-L40S"),
    ("NVIDIA H100 80GB HBM3-MIG-1g.10gb+me", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb-me"),
])
def test_card_names_become_gpu_feature_discoverys_product_labels(card: str, value: str) -> None:
    assert product_label_value(card) == value
