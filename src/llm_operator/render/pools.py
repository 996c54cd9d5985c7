"""vLLM and SGLang models as Gateway API Inference Extension pools: InferencePool, HTTPRoute.

For clusters that run llm-d or another inference gateway: the gateway picks a replica
through the endpoint picker (queue depth, KV cache, prefix affinity) instead of the
Service's round robin. Shapes follow inference.networking.k8s.io/v1 and
gateway.networking.k8s.io/v1 (the CRDs in the tests' schemas).
"""

from __future__ import annotations

from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import PORT
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import metadata, selector_labels
from llm_operator.render.picker import picker_name

COMPONENT = "inference"
POOL_ENGINES = frozenset({"vllm", "sglang"})  # the engines the endpoint picker can read
MODEL_HEADER = "X-Gateway-Model-Name"  # set from the body's "model" by the gateway


def inference_pool(model: LLMModel, settings: Settings, owner_uid: str | None,
                   only: dict[str, str] | None = None) -> dict[str, Any]:
    """The pool of the model's serving pods (``only``: further labels), with its picker."""
    picker = settings.inference_pool.endpoint_picker
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": metadata(model, model.name, COMPONENT, owner_uid),
        "spec": {
            "selector": {"matchLabels": {**selector_labels(model), **(only or {})}},
            "targetPorts": [{"number": PORT}],
            "endpointPickerRef": {
                "name": picker_name(model, settings),
                "port": {"number": picker.port},
                "failureMode": picker.failure_mode,
            },
        },
    }


def http_route(model: LLMModel, settings: Settings, owner_uid: str | None) -> dict[str, Any]:
    """Requests for the model's id, on the configured Gateway, to its pool."""
    parent = settings.inference_pool.gateway
    ref: dict[str, Any] = {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                           "name": parent.name}
    if parent.namespace:
        ref["namespace"] = parent.namespace
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(model, model.name, COMPONENT, owner_uid),
        "spec": {
            "parentRefs": [ref],
            "rules": [{
                "matches": [{"path": {"type": "PathPrefix", "value": "/v1"},
                             "headers": [{"type": "Exact", "name": MODEL_HEADER,
                                          "value": model.spec.model_id}]}],
                "backendRefs": [{"group": "inference.networking.k8s.io",
                                 "kind": "InferencePool", "name": model.name}],
            }],
        },
    }
