"""Discovery labels: the guide's tiers, and a desired set that also removes stale keys."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api import labels as L
from llm_operator.api.validation import parse_llmmodel


def _spec(base: dict[str, Any], **spec: Any) -> Any:
    doc = copy.deepcopy(base)
    doc["spec"].update(spec)
    return parse_llmmodel(doc).spec


@pytest.mark.parametrize(("context_k", "tiers"), [
    (8, ["32k"]),
    (64, ["32k", "64k"]),
    (128, ["32k", "64k", "128k"]),
    (256, ["32k", "64k", "128k", "256k"]),
    (1000, ["32k", "64k", "128k", "256k", "1m"]),
    (10000, ["32k", "64k", "128k", "256k", "1m", "10m"]),
])
def test_context_tiers_are_cumulative(base_local: dict[str, Any], context_k: int,
                                      tiers: list[str]) -> None:
    labels = L.discovery_labels(_spec(base_local, contextWindowK=context_k))
    got = sorted(k.removeprefix("ai.example.io/context-") for k in labels if "/context-" in k)
    assert got == sorted(tiers)


@pytest.mark.parametrize(("vram", "tier"), [
    (0, "cpu"), (8, "8gb"), (9, "16gb"), (16, "16gb"), (24, "24gb"), (48, "48gb"),
    (80, "80gb"), (141, "141gb"), (192, "192gb"), (288, "multi-accelerator"),
])
def test_vram_tier_boundaries(vram: int, tier: str) -> None:
    assert L.vram_tier(vram) == tier


def test_labels_of_a_guide_model(base_local: dict[str, Any]) -> None:
    spec = _spec(base_local, domains=["code", "vision"], quantization="AWQ", modelType="MoE")
    assert L.discovery_labels(spec) == {
        "ai.example.io/accelerator-vendor": "nvidia",
        "ai.example.io/context-32k": "true",
        "ai.example.io/deployment-mode": "local",
        "ai.example.io/domain-code": "true",
        "ai.example.io/domain-vision": "true",
        "ai.example.io/model-type": "MoE",
        "ai.example.io/quantization": "AWQ",
        "ai.example.io/vram-tier": "80gb",
    }


def test_remote_models_get_no_accelerator_labels(base_local: dict[str, Any]) -> None:
    spec = _spec(base_local, deploymentMode="remote", modelId="gpt-5.5", remoteApi={
        "baseUrl": "https://api.openai.com/v1", "apiKeySecret": "k"})
    labels = L.discovery_labels(spec)
    assert L.VRAM_TIER not in labels and L.ACCELERATOR_VENDOR not in labels
    assert labels[L.DEPLOYMENT_MODE] == "remote"


def test_reconcile_removes_stale_keeps_user_labels(base_local: dict[str, Any]) -> None:
    current = {"ai.example.io/domain-vision": "true", "ai.example.io/context-1m": "true",
               "ai.example.io/family": "qwen35", "team": "ml",
               "ai.example.io/vram-tier": "24gb"}
    patch = L.reconcile_labels(current, _spec(base_local, domains=["code"]))
    assert patch["ai.example.io/domain-vision"] is None
    assert patch["ai.example.io/context-1m"] is None
    assert patch["ai.example.io/domain-code"] == "true"
    assert patch["ai.example.io/vram-tier"] == "80gb"
    assert "team" not in patch and "ai.example.io/family" not in patch


def test_reconcile_is_empty_when_labels_are_current(base_local: dict[str, Any]) -> None:
    spec = _spec(base_local, domains=["code"])
    current = {**L.discovery_labels(spec), "team": "ml"}
    assert L.reconcile_labels(current, spec) == {}


@pytest.mark.parametrize(("max_vram", "tiers"), [
    (0, ["cpu"]), (24, ["cpu", "8gb", "16gb", "24gb"]), (20, ["cpu", "8gb", "16gb"]),
])
def test_tiers_at_most(max_vram: float, tiers: list[str]) -> None:
    assert L.tiers_at_most(max_vram) == tiers
