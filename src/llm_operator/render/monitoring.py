"""Prometheus-Operator monitors for the engine's or the gateway's /metrics."""

from __future__ import annotations

from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import metadata


def monitor(
    model: LLMModel, component: str, path: str, settings: Settings, owner_uid: str | None
) -> dict[str, Any] | None:
    """A ServiceMonitor or PodMonitor (per settings) scraping ``path`` on port http."""
    mon = settings.monitoring
    if mon.kind == "None":
        return None
    selector = {"matchLabels": {L.MODEL_NAME: model.name, L.K8S_COMPONENT: component}}
    endpoint = {"port": "http", "path": path, "interval": mon.interval}
    if mon.kind == "ServiceMonitor":
        spec: dict[str, Any] = {"selector": selector, "endpoints": [endpoint],
                                "podTargetLabels": [L.MODEL_NAME]}
    else:
        spec = {"selector": selector, "podMetricsEndpoints": [endpoint],
                "podTargetLabels": [L.MODEL_NAME]}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": mon.kind,
        "metadata": metadata(model, model.name, component, owner_uid, labels=dict(mon.labels)),
        "spec": spec,
    }
