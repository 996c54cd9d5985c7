"""Names, labels, owner references and hashes shared by every rendered child."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import API_VERSION, KIND, LLMModel

# config/priority's class above every model's: the operator, router, MCP server, the remote
# models' gateways and the pools' pickers are never preempted by a model.
CONTROL_PLANE_CLASS = "llmop-control-plane"


def pvc_name(model: LLMModel) -> str:
    return f"{model.name}-model-cache"


def config_map_name(model: LLMModel) -> str:
    return f"{model.name}-proxy-config"


def http_scaled_object_name(model: LLMModel) -> str:
    return f"{model.name}-http"


def selector_labels(model: LLMModel) -> dict[str, str]:
    """The Deployment selector (immutable, so the same for local and remote models)."""
    return {L.APP: model.name, L.MODEL_NAME: model.name}


def child_labels(model: LLMModel, component: str) -> dict[str, str]:
    """Labels on every child: ownership (for pruning), component and the selector labels."""
    return {
        **selector_labels(model),
        L.K8S_NAME: "llm-model",
        L.K8S_INSTANCE: model.name,
        L.K8S_COMPONENT: component,
        L.K8S_MANAGED_BY: L.MANAGED_BY_VALUE,
    }


def pod_metadata(model: LLMModel, labels: dict[str, str], annotations: dict[str, str]
                 ) -> dict[str, Any]:
    """A pod template's metadata: the spec's podLabels and podAnnotations under ours.

    On a shared key the operator's value wins (its selectors and scrape settings must hold).
    """
    merged_labels = {**(model.spec.pod_labels or {}), **labels}
    merged_annotations = {**(model.spec.pod_annotations or {}), **annotations}
    meta: dict[str, Any] = {"labels": merged_labels}
    if merged_annotations:
        meta["annotations"] = merged_annotations
    return meta


def metadata(
    model: LLMModel,
    name: str,
    component: str,
    owner_uid: str | None,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": model.namespace,
        "labels": {**child_labels(model, component), **(labels or {})},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner_uid:
        meta["ownerReferences"] = [{
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": model.name,
            "uid": owner_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }]
    return meta


def content_hash(data: Any) -> str:
    """A short stable hash of JSON-able data (pod-template annotation to roll pods)."""
    encoded = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:16]


def hub_env(endpoint: str | None) -> list[dict[str, Any]]:
    """The Hugging Face client's environment: its server (settings), timeouts, no telemetry."""
    env: list[dict[str, Any]] = [{"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
                                 {"name": "HF_HUB_DOWNLOAD_TIMEOUT", "value": "60"}]
    if endpoint:
        env.append({"name": "HF_ENDPOINT", "value": endpoint})
    return env


def restricted_container_security(non_root: bool, add: tuple[str, ...] = ()) -> dict[str, Any]:
    """Container securityContext: no privilege escalation, capabilities dropped."""
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if add:
        caps["add"] = list(add)
    sec: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": caps}
    if non_root:
        sec.update({"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532})
    return sec
