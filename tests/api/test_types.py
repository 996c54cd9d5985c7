"""LLMModel types: exact round-trip, defaults, and field-level errors with their paths."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel

from k8s_schemas import _strict, apply_defaults, llmmodel_schema
from samples import EDGE_SAMPLES, GUIDE_SAMPLES, load_yaml


@pytest.mark.parametrize("path", GUIDE_SAMPLES + EDGE_SAMPLES, ids=lambda p: p.stem)
def test_samples_round_trip_exactly(path: Path) -> None:
    doc = load_yaml(path)
    assert parse_llmmodel(doc).to_dict() == doc


def test_the_seven_guide_samples_are_present() -> None:
    assert [p.stem for p in GUIDE_SAMPLES] == [
        "claude-opus47-remote", "gemini31-remote", "gemma4-26b-amd", "gemma4-31b-nvidia",
        "gpt55-remote", "qwen35-9b-cpu", "qwen36-35b-gaudi",
    ]


def test_defaults_match_the_guide(base_local: dict[str, Any]) -> None:
    spec = parse_llmmodel(base_local).spec
    assert (spec.accelerator_vendor, spec.inference_engine, spec.model_type,
            spec.quantization) == ("nvidia", "vllm", "Dense", "None")
    assert (spec.resources.accelerator_count, spec.resources.cpu_millicores,
            spec.resources.memory_gi_b) == (1, 4000, 16)
    assert (spec.scaling.min_replicas, spec.scaling.max_replicas, spec.scaling.scale_up_threshold,
            spec.scaling.cooldown_period_seconds) == (1, 3, 5, 300)
    assert spec.mcp_exposure.enabled is False


def test_crd_defaults_equal_type_defaults_but_vendor_and_engine(
        base_local: dict[str, Any]) -> None:
    """The apiserver's defaulting (from the generated CRD) and pydantic's agree.

    Except acceleratorVendor and inferenceEngine: the CRD leaves them unset (a remote model
    has neither; `kubectl get lm` showed nvidia/vllm for it), the types default them.
    """
    defaulted = apply_defaults(base_local, llmmodel_schema())
    by_types = LLMModel.model_validate(base_local).model_dump(by_alias=True, mode="json",
                                                              exclude_none=True)
    assert defaulted["spec"] | {"acceleratorVendor": "nvidia", "inferenceEngine": "vllm"} \
        == by_types["spec"] | {"totalParametersBillions": 9.0}
    assert "acceleratorVendor" not in defaulted["spec"]
    assert "inferenceEngine" not in defaulted["spec"]


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


# (case, path to set, value, expected problem path, words the message must contain)
FIELD_CASES = [
    ("wrong enum", "spec.deploymentMode", "hybrid", "spec.deploymentMode", "'local' or 'remote'"),
    ("wrong vendor", "spec.acceleratorVendor", "tpu", "spec.acceleratorVendor", "'cpu'"),
    ("negative count", "spec.resources.acceleratorCount", -1, "spec.resources.acceleratorCount",
     "greater than or equal to 0"),
    ("absurd count", "spec.resources.acceleratorCount", 64, "spec.resources.acceleratorCount",
     "less than or equal to 16"),
    ("zero params", "spec.totalParametersBillions", 0, "spec.totalParametersBillions",
     "greater than 0"),
    ("absurd context", "spec.contextWindowK", 10**7, "spec.contextWindowK", "less than"),
    ("negative replicas", "spec.scaling.minReplicas", -2, "spec.scaling.minReplicas",
     "greater than or equal to 0"),
    ("bad tool name", "spec.mcpExposure.toolName", "has spaces!", "spec.mcpExposure.toolName",
     "MCP tool name"),
    ("bad secret name", "spec.modelSource", {"type": "huggingface",
                                             "huggingFaceTokenSecret": "Not_Valid"},
     "spec.modelSource.huggingFaceTokenSecret", "Kubernetes object name"),
    ("unknown field", "spec.replicas", 3, "spec.replicas", "unknown field"),
    ("unknown nested field", "spec.resources.gpus", 2, "spec.resources.gpus", "unknown field"),
    ("wrong type", "spec.contextWindowK", "lots", "spec.contextWindowK", "integer"),
    ("bad name", "metadata.name", "Gemma_4", "metadata.name", "DNS-1035 label"),
    ("duplicate domains", "spec.domains", ["code", "code"], "spec.domains", "duplicate"),
    ("bad pod label value", "spec.podLabels", {"team": "search & rescue"},
     "spec.podLabels.team", "a label value"),
    ("too many pod labels", "spec.podLabels", {f"k{i}": "v" for i in range(65)},
     "spec.podLabels", "at most 64 items"),
    ("parallel slots", "spec.llamaCpp", {"parallelSlots": 0}, "spec.llamaCpp.parallelSlots",
     "greater than or equal to 1"),
    ("guard action", "spec.guardrails", {"input": [{"name": "pii", "action": "redact",
                                                     "pii": {}}]},
     "spec.guardrails.input[0].action", "'mask', 'block' or 'log'"),
    ("guard entity", "spec.guardrails", {"output": [{"name": "pii", "pii": {
        "entities": ["PERSON"]}}]}, "spec.guardrails.output[0].pii.entities[0]", "'CREDIT_CARD'"),
    ("guard threshold", "spec.guardrails", {"input": [{"name": "pii", "pii": {
        "scoreThreshold": 1.5}}]}, "spec.guardrails.input[0].pii.scoreThreshold",
     "less than or equal to 1"),
    ("guard name", "spec.guardrails", {"input": [{"name": "No PII", "pii": {}}]},
     "spec.guardrails.input[0].name", "must be a guard name"),
    ("guard detector", "spec.guardrails", {"input": [{"name": "pii"}]},
     "spec.guardrails.input[0]", "exactly one detector"),
    ("guard two detectors", "spec.guardrails", {"input": [{"name": "x", "pii": {}, "judge": {
        "model": "llama-guard", "family": "llama-guard-3"}}]}, "spec.guardrails.input[0]",
     "exactly one detector"),
    ("judge mask", "spec.guardrails", {"output": [{"name": "x", "action": "mask", "judge": {
        "model": "llama-guard", "family": "shieldgemma"}}]}, "spec.guardrails.output[0]",
     "action mask replaces what pii finds"),
    ("judge category", "spec.guardrails", {"input": [{"name": "x", "judge": {
        "model": "llama-guard", "family": "llama-guard-3", "categories": ["S15"]}}]},
     "spec.guardrails.input[0].judge", "S15 unknown to llama-guard-3"),
    ("moderation category", "spec.guardrails", {"input": [{"name": "x", "moderation": {
        "model": "omni-moderation-latest", "categories": ["violent"]}}]},
     "spec.guardrails.input[0].moderation.categories[0]", "'harassment'"),
    ("moderation threshold", "spec.guardrails", {"input": [{"name": "x", "moderation": {
        "model": "omni-moderation-latest", "scoreThreshold": 0}}]},
     "spec.guardrails.input[0].moderation.scoreThreshold", "greater than 0"),
    ("bad base url", "spec.remoteApi", {"baseUrl": "ftp://models.example.com",
                                        "apiKeySecret": "k"},
     "spec.remoteApi.baseUrl", "http:// or https:// URL"),
]


# refused by the API server's CEL (tests/api/test_rules.py), not by the JSON schema alone
CEL_ONLY = {"bad name", "duplicate domains", "guard detector", "guard two detectors",
            "judge mask", "judge category"}


@pytest.mark.parametrize(("case", "path", "value", "where", "words"), FIELD_CASES,
                         ids=[c[0] for c in FIELD_CASES])
def test_field_errors_name_the_field(base_local: dict[str, Any], case: str, path: str,
                                     value: Any, where: str, words: str) -> None:
    with pytest.raises(InvalidModel) as caught:
        parse_llmmodel(_set(base_local, path, value))
    problems = {p.path: p.message for p in caught.value.problems}
    assert where in problems, problems
    assert words in problems[where]


@pytest.mark.parametrize(("case", "path", "value", "where", "words"),
                         [c for c in FIELD_CASES if c[0] not in CEL_ONLY],
                         ids=[c[0] for c in FIELD_CASES if c[0] not in CEL_ONLY])
def test_crd_schema_rejects_the_same_fields(base_local: dict[str, Any], case: str, path: str,
                                            value: Any, where: str, words: str) -> None:
    """The generated CRD (strict, like kubectl) rejects what the types reject."""
    validator = jsonschema.Draft4Validator(_strict(llmmodel_schema()))
    errors = list(validator.iter_errors(_set(base_local, path, value)))
    assert errors, f"CRD schema accepted {case}"
    assert validator.is_valid(base_local)


@pytest.mark.parametrize(("doc", "message"), [
    ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}, "not an LLMModel"),
    (["a", "list"], "expected a mapping"),
    ({"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel", "metadata": {"name": "x"}},
     "spec: required field is missing"),
])
def test_documents_that_are_not_llmmodels(doc: Any, message: str) -> None:
    with pytest.raises(InvalidModel, match=message):
        parse_llmmodel(doc)


def test_every_problem_is_reported_not_just_the_first(base_local: dict[str, Any]) -> None:
    doc = _set(_set(base_local, "spec.contextWindowK", -1), "spec.quantization", "Q3")
    with pytest.raises(InvalidModel) as caught:
        parse_llmmodel(doc)
    assert {p.path for p in caught.value.problems} == {"spec.contextWindowK", "spec.quantization"}
