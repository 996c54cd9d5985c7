"""A machine's models published into a cluster by `llmop up --register` (pure).

Each model served on the machine becomes a remote LLMModel whose upstream is the machine's
gateway, so the cluster's gateway, MCP server and registry serve it like any model. A Lease
the machine renews says it is still there; the operator withdraws (phase Failed, no
workload) a model whose Lease lapsed.
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import API_VERSION, KIND, LLMModel

LEASE_SECONDS = 30  # a machine silent this long is gone
RENEW_SECONDS = 10
UNUSED_KEY = "unused"  # `llmop up`'s gateway checks no client key unless told to
# Spec fields that describe the model (kept) rather than how a cluster would run it.
DESCRIPTIVE = ("modelId", "modelType", "totalParametersBillions", "activeParametersBillions",
               "quantization", "contextWindowK", "domains", "languages", "mcpExposure")


def machine_name(hostname: str) -> str:
    """``llmop-up-<host>`` as a DNS label (the Lease's and the Secret's name)."""
    slug = re.sub(r"[^a-z0-9-]+", "-", hostname.lower()).strip("-") or "machine"
    return f"llmop-up-{slug}"[:63].rstrip("-")


def registered_model(model: LLMModel, *, namespace: str, base_url: str, lease: str
                     ) -> dict[str, Any]:
    """The remote LLMModel that stands for ``model`` in the cluster."""
    source = model.model_dump(by_alias=True, exclude_none=True, mode="json")
    spec = {k: v for k, v in source["spec"].items() if k in DESCRIPTIVE}
    meta = model.metadata
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": model.name, "namespace": namespace,
                     "labels": {**(meta.labels or {}), L.REGISTERED_BY: lease},
                     "annotations": dict(meta.annotations or {})},
        "spec": {**spec, "deploymentMode": "remote",
                 "remoteApi": {"baseUrl": base_url, "apiKeySecret": lease}},
    }


def key_secret(namespace: str, lease: str) -> dict[str, Any]:
    """The Secret the registered models' gateway sends as the upstream key."""
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": lease, "namespace": namespace,
                         "labels": {L.REGISTERED_BY: lease}},
            "stringData": {"apiKey": UNUSED_KEY}}


def lease_object(namespace: str, lease: str, holder: str, now: datetime.datetime
                 ) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": lease, "namespace": namespace,
                         "labels": {L.REGISTERED_BY: lease}},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": micro_time(now)}}


def micro_time(moment: datetime.datetime) -> str:
    """Kubernetes MicroTime (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_left(lease: dict[str, Any] | None, now: datetime.datetime) -> float | None:
    """Seconds until the Lease lapses (None: no Lease, or it has lapsed)."""
    spec = (lease or {}).get("spec") or {}
    renewed, duration = spec.get("renewTime"), spec.get("leaseDurationSeconds")
    if not isinstance(renewed, str) or not isinstance(duration, int):
        return None
    try:
        moment = datetime.datetime.fromisoformat(renewed.replace("Z", "+00:00"))
    except ValueError:
        return None
    left = (moment - now).total_seconds() + duration
    return left if left > 0 else None
