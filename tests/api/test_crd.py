"""The generated CRD: committed file in sync, a valid structural CRD, the guide's columns."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import yaml

from llm_operator.api.crd import crd

from samples import REPO

CRD_FILE = REPO / "config" / "crd" / "bases" / "ai.example.io_llmmodels.yaml"


def test_committed_crd_matches_fresh_generation() -> None:
    assert yaml.safe_load(CRD_FILE.read_text()) == crd(), (
        "config/crd/bases is stale: run `make crd` and commit the result")


def test_crd_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(crd(), "1.33.0", strict=True)


def test_names_columns_and_status_subresource() -> None:
    spec = crd()["spec"]
    assert (spec["group"], spec["names"]["kind"], spec["names"]["shortNames"]) == (
        "ai.example.io", "LLMModel", ["lm"])
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Model", "Vendor", "Engine", "Mode", "VRAM", "Context", "Status", "Endpoint"]


def _walk(node: Any, path: str = "") -> list[str]:
    """Structural-schema violations: every node typed, no false additionalProperties."""
    issues = []
    if isinstance(node, dict):
        if "type" not in node and not node.get("x-kubernetes-int-or-string"):
            issues.append(f"{path or '<root>'} has no type")
        if node.get("additionalProperties") is False:
            issues.append(f"{path} sets additionalProperties: false")
        # anyOf only as Kubernetes writes int-or-string: [{type: integer}, {type: string}]
        int_or_string = node.get("x-kubernetes-int-or-string") and node.get("anyOf") == [
            {"type": "integer"}, {"type": "string"}]
        if "patternProperties" in node or "$ref" in node \
                or ("anyOf" in node and not int_or_string):
            issues.append(f"{path} uses a keyword structural schemas forbid")
        for name, prop in node.get("properties", {}).items():
            issues += _walk(prop, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                issues += _walk(node[key], f"{path}[]")
    return issues


def test_schema_is_structural() -> None:
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _walk(schema) == []


def test_status_phase_lists_the_additions_idle_and_waiting_for_gpu() -> None:
    status = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["phase"]["enum"] == [
        "Pending", "Downloading", "Starting", "Ready", "Degraded", "Failed", "Proxying", "Idle",
        "WaitingForGPU"]
    assert status["properties"]["conditions"]["x-kubernetes-list-type"] == "map"


def test_api_reference_documents_every_field() -> None:
    """docs/reference/llmmodel.md names every spec field path of the CRD (it is written from
    it), and docs/api.md every status field path."""
    reference = (REPO / "docs" / "reference" / "llmmodel.md").read_text()
    text = (REPO / "docs" / "api.md").read_text()
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    def paths(node: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for name, prop in node.get("properties", {}).items():
            out.append(f"{prefix}.{name}")
            out += paths(prop, f"{prefix}.{name}")
            out += paths(prop.get("items", {}), f"{prefix}.{name}[]")
        return out

    missing = [p for p in paths(schema["properties"]["spec"], "spec")
               if f"`{p.removeprefix('spec.')}`" not in reference]
    missing += [p for p in paths(schema["properties"]["status"], "status")
                if f"`{p}`" not in text]
    assert missing == []
