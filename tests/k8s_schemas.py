"""Test helpers: validate objects against official schemas and evaluate CRD CEL rules."""

from __future__ import annotations

import copy
import os
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parent.parent
K8S_VERSION = "1.36.0"  # the test node's (../shared/k8s: v1.36.2)
CORE_GROUPS = {"v1", "apps/v1", "networking.k8s.io/v1", "rbac.authorization.k8s.io/v1",
               "apiextensions.k8s.io/v1", "policy/v1", "coordination.k8s.io/v1",
               "scheduling.k8s.io/v1", "discovery.k8s.io/v1", "resource.k8s.io/v1"}


def schemas_dir() -> Path:
    """The upstream third-party CRDs (../shared/schemas/crds, or $LLMOP_SCHEMAS)."""
    path = Path(os.environ.get("LLMOP_SCHEMAS", REPO.parent / "shared" / "schemas" / "crds"))
    if not path.is_dir():
        raise FileNotFoundError(
            f"third-party CRD schemas not found at {path}: set LLMOP_SCHEMAS to the "
            "directory holding keda.sh_scaledobjects.yaml and friends")
    return path


def large_schemas_dir() -> Path:
    """The CRDs too large for client-side apply (LeaderWorkerSet, DisaggregatedSet).

    Next to the others (crds-large beside crds); install them with server-side apply.
    """
    path = schemas_dir().parent / "crds-large"
    if not path.is_dir():
        raise FileNotFoundError(f"the LeaderWorkerSet and DisaggregatedSet CRDs are not at "
                                f"{path}: put them beside {schemas_dir()}")
    return path


def _strict(schema: Any) -> Any:
    """A copy of an OpenAPI v3 schema that rejects unknown fields (like kubectl --validate)."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@cache
def _crd_validators() -> dict[tuple[str, str], jsonschema.Draft4Validator]:
    validators = {}
    files = [*schemas_dir().glob("*.yaml"), *large_schemas_dir().glob("*.yaml"),
             REPO / "config" / "crd" / "bases" / "ai.example.io_llmmodels.yaml"]
    for file in files:
        crd = yaml.safe_load(file.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft4Validator(
                _strict(schema))
    return validators


def validate_object(obj: dict[str, Any]) -> list[str]:
    """Schema errors of one rendered object (empty when valid)."""
    api, kind = obj["apiVersion"], obj["kind"]
    if api in CORE_GROUPS:
        try:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            return [f"{kind} {obj['metadata'].get('name')}: {exc.message} at "
                    f"{'.'.join(map(str, exc.path))}"]
        return []
    validator = _crd_validators().get((api, kind))
    if validator is None:
        return [f"no schema for {api} {kind}"]
    return [f"{kind}: {e.message} at {'.'.join(map(str, e.absolute_path))}"
            for e in validator.iter_errors(obj)]


@cache
def _llmmodel_crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(
        (REPO / "config" / "crd" / "bases" / "ai.example.io_llmmodels.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def llmmodel_schema() -> dict[str, Any]:
    """The CRD's schema, parsed once (0.2 s of pure-Python YAML), as a copy to change."""
    return copy.deepcopy(_llmmodel_crd_schema())


def apply_defaults(obj: Any, schema: dict[str, Any]) -> Any:
    """Structural defaulting as the apiserver does it (defaults apply inside present objects)."""
    if isinstance(obj, dict) and "properties" in schema:
        out = dict(obj)
        for name, prop in schema["properties"].items():
            if name not in out and "default" in prop:
                out[name] = copy.deepcopy(prop["default"])
            if name in out:
                out[name] = apply_defaults(out[name], prop)
        return out
    if isinstance(obj, list) and "items" in schema:
        return [apply_defaults(item, schema["items"]) for item in obj]
    if schema.get("type") == "number" and isinstance(obj, int):
        return float(obj)  # CEL sees schema numbers as double
    return obj


@cache
def _cel_program(rule: str) -> celpy.Runner:
    """One rule compiled once (lark parses it: ~0.1 s an object for the 40-odd rules)."""
    env = celpy.Environment()
    return env.program(env.compile(rule))


def cel_failures(obj: dict[str, Any]) -> list[str]:
    """Messages of the CRD's x-kubernetes-validations that ``obj`` (defaulted) breaks."""
    schema = _llmmodel_crd_schema()  # read, never changed
    failures: list[str] = []

    def walk(node: Any, sch: dict[str, Any]) -> None:
        for rule in sch.get("x-kubernetes-validations", []):
            program = _cel_program(rule["rule"])
            try:
                result = program.evaluate({"self": celpy.json_to_cel(node)})
            except celpy.CELEvalError as exc:
                failures.append(f"{rule['message']} (evaluation error: {exc})")
                continue
            if isinstance(result, celpy.CELEvalError) or not bool(result):
                failures.append(rule["message"])
        if isinstance(node, dict):
            for name, prop in sch.get("properties", {}).items():
                if name in node:
                    walk(node[name], prop)

    walk(apply_defaults(obj, schema), schema)
    return failures
