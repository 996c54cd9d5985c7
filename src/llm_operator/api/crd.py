"""Generate the LLMModel CustomResourceDefinition from the API types and rules."""

from __future__ import annotations

import copy
from typing import Any

from llm_operator.api.labels import SCHEMA_VERSION
from llm_operator.api.model_status import LLMModelStatus
from llm_operator.api.rule import Rule
from llm_operator.api.rules import RULES
from llm_operator.api.v1alpha1 import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    LLMModelSpec,
)

PRINTER_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("Model", "string", ".spec.modelId"),
    ("Vendor", "string", ".spec.acceleratorVendor"),
    ("Engine", "string", ".spec.inferenceEngine"),
    ("Mode", "string", ".spec.deploymentMode"),
    ("VRAM", "string", ".spec.resources.vramPerAcceleratorGiB"),
    ("Context", "string", ".spec.contextWindowK"),
    ("Status", "string", ".status.phase"),
    ("Endpoint", "string", ".status.endpoint"),
)

_DROP = {"title"}


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    """Inline $refs and reshape pydantic's JSON Schema into a Kubernetes structural schema."""
    if isinstance(node, list):
        return [_resolve(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].split("/")[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        target.update(extra)
        return _resolve(target, defs)
    if "anyOf" in node:
        variants = [v for v in node["anyOf"] if v.get("type") != "null"]
        if len(variants) == 1:
            merged = {k: v for k, v in node.items() if k != "anyOf"}
            merged = {**variants[0], **merged}
            return _resolve(merged, defs)
        node = {**node, "anyOf": variants}  # int-or-string: optional by leaving it out
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or key == "$defs":
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {name: _resolve(prop, defs) for name, prop in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = _resolve(value, defs)
        elif key == "exclusiveMinimum":
            out["minimum"], out["exclusiveMinimum"] = value, True
        elif key == "exclusiveMaximum":
            out["maximum"], out["exclusiveMaximum"] = value, True
        elif key in {"propertyNames", "patternProperties"}:
            continue
        elif key == "additionalProperties" and value is False:
            continue  # structural schemas prune unknown fields; false is not allowed
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("type") == "integer":
        out.setdefault("format", "int64")
    return out


def _schema_of(model: type[Any]) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    schema: dict[str, Any] = _resolve(raw, defs)
    if "description" in schema:
        schema["description"] = " ".join(str(schema["description"]).split())
    return schema


def _validation(rule: Rule) -> dict[str, str]:
    entry = {"rule": rule.cel, "message": rule.message, "reason": rule.reason}
    if rule.location:  # fieldPath is relative to the rule's location
        entry["fieldPath"] = rule.field
    return entry


def _attach_rules(root: dict[str, Any]) -> None:
    for rule in RULES:
        node = root
        for part in filter(None, rule.location.split(".")):
            node = node["properties"][part]
        node.setdefault("x-kubernetes-validations", []).append(_validation(rule))


def _tidy_descriptions(node: Any) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("description"), str):
            node["description"] = " ".join(node["description"].split())
        for value in node.values():
            _tidy_descriptions(value)
    elif isinstance(node, list):
        for item in node:
            _tidy_descriptions(item)


def openapi_schema() -> dict[str, Any]:
    """The openAPIV3Schema of LLMModel v1alpha1, with its CEL rules."""
    root: dict[str, Any] = {
        "type": "object",
        "description": "LLMModel describes a large language model served in the cluster "
        "(local) or proxied to a frontier API (remote).",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _schema_of(LLMModelSpec),
            "status": _schema_of(LLMModelStatus),
        },
    }
    _attach_rules(root)
    _tidy_descriptions(root)
    return root


def crd() -> dict[str, Any]:
    """The complete CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "annotations": {SCHEMA_VERSION: VERSION},
        },
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["ai"],
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [
                        {"name": name, "type": kind, "jsonPath": path}
                        for name, kind, path in PRINTER_COLUMNS
                    ],
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }
