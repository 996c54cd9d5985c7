"""The model's Service and the in-cluster endpoint clients call."""

from __future__ import annotations

from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import PORT
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import metadata


def service_host(model: LLMModel, settings: Settings) -> str:
    return f"{model.name}.{model.namespace}.svc.{settings.cluster_domain}"


def endpoint(model: LLMModel, settings: Settings) -> str:
    """The OpenAI-compatible base URL of the model inside the cluster."""
    return f"http://{service_host(model, settings)}:{PORT}/v1"


def service(model: LLMModel, component: str, owner_uid: str | None,
            only: dict[str, str] | None = None) -> dict[str, Any]:
    """The model's ClusterIP Service; ``only``: further labels its pods must have."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(model, model.name, component, owner_uid),
        "spec": {
            "type": "ClusterIP",
            "selector": {L.MODEL_NAME: model.name, **(only or {})},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }
