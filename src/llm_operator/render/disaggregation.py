"""Prefill and decode on separate pods: the two roles, as Deployments or a DisaggregatedSet.

Each role is the model's inference pod with the role's resources and replicas, vLLM's NIXL
connector (`--kv-transfer-config`, its side channel on port 5600) and the label
`llm-d.ai/role` that llm-d's picker filters on. A decode pod also runs llm-d's routing
sidecar on port 8000 (vLLM moves to 8200): given the header x-prefiller-host-port it has
the chosen prefill pod compute the prompt's KV cache, then decodes with it; without the
header it serves the request locally. So the model's Service (decode pods only) answers
plain requests, and the pool (both roles) lets the picker split them. Shapes follow llm-d's
P/D deployments and disaggregatedset.x-k8s.io/v1 (the CRD in the tests' schemas).
"""

from __future__ import annotations

import json
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.serving import ROLES
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import PORT
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import metadata, restricted_container_security, selector_labels
from llm_operator.render.workload import SERVER_CONTAINER

API_VERSION, KIND = "disaggregatedset.x-k8s.io/v1", "DisaggregatedSet"
ENGINE_PORT_NAME = "vllm"  # the engine's port on both roles (metrics, probes)
DECODE_ENGINE_PORT = 8200  # behind the routing sidecar, which takes PORT
NIXL_PORT = 5600
KV_TRANSFER = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"},
                         separators=(",", ":"))
SIDECAR = "routing-sidecar"
DECODE_ONLY = {L.ROLE: "decode"}  # what the model's Service selects


def role_model(model: LLMModel, role: str) -> LLMModel:
    """The model as one role serves it: the role's resources over spec.resources."""
    resources = model.spec.role_resources(role)
    return model.model_copy(update={"spec": model.spec.model_copy(
        update={"resources": resources})})


def replicas(model: LLMModel, role: str) -> int:
    roles = model.spec.serving.disaggregation if model.spec.serving else None
    assert roles is not None
    return roles.role(role).replicas


def _engine(container: dict[str, Any], port: int) -> None:
    """Make the engine container speak NIXL and listen on ``port`` (named, for probes)."""
    args = list(container["args"])
    args[args.index("--port") + 1] = str(port)
    container["args"] = [*args, "--kv-transfer-config", KV_TRANSFER]
    container["ports"] = [
        {"name": ENGINE_PORT_NAME, "containerPort": port, "protocol": "TCP"},
        {"name": "nixl", "containerPort": NIXL_PORT, "protocol": "TCP"}]
    container["env"] = [*container["env"],
                        {"name": "VLLM_NIXL_SIDE_CHANNEL_HOST",
                         "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_PORT)}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        container[probe]["httpGet"]["port"] = ENGINE_PORT_NAME


def _sidecar(settings: Settings) -> dict[str, Any]:
    """llm-d's routing sidecar: a native sidecar (an init container that keeps running)."""
    return {
        "name": SIDECAR,
        "image": settings.disaggregation.routing_sidecar_image,
        "imagePullPolicy": settings.images.pull_policy,
        "restartPolicy": "Always",
        "args": [f"--port={PORT}", f"--vllm-port={DECODE_ENGINE_PORT}",
                 "--kv-connector=nixlv2", "--secure-proxy=false"],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "securityContext": restricted_container_security(non_root=True),
    }


def role_deployment(model: LLMModel, role: str, deployment: dict[str, Any],
                    settings: Settings) -> dict[str, Any]:
    """One role's Deployment, from the inference Deployment rendered for the role's model."""
    role_labels = {L.ROLE: role, L.K8S_COMPONENT: role}
    meta = deployment["metadata"]
    meta["name"] = f"{model.name}-{role}"
    meta["labels"].update(role_labels)
    spec = deployment["spec"]
    spec["replicas"] = replicas(model, role)
    spec["selector"] = {"matchLabels": {**selector_labels(model), L.ROLE: role}}
    template = spec["template"]
    template["metadata"]["labels"].update(role_labels)
    port = DECODE_ENGINE_PORT if role == "decode" else PORT
    annotations = template["metadata"].get("annotations") or {}
    if L.PROMETHEUS_PORT in annotations:
        annotations[L.PROMETHEUS_PORT] = str(port)
    pod = template["spec"]
    (server,) = [c for c in pod["containers"] if c["name"] == SERVER_CONTAINER]
    _engine(server, port)
    if role == "decode":
        pod["initContainers"] = [*pod["initContainers"], _sidecar(settings)]
    return {**deployment, "spec": {"replicas": spec.pop("replicas"), **spec}}


def disaggregated_set(model: LLMModel, deployments: list[dict[str, Any]],
                      owner_uid: str | None) -> dict[str, Any]:
    """Both roles as one DisaggregatedSet: each a LeaderWorkerSet of one-pod groups."""
    roles = []
    for role, deployment in zip(ROLES, deployments, strict=True):
        template = deployment["spec"]["template"]
        roles.append({
            "name": role,
            # the LeaderWorkerSet the DisaggregatedSet makes gets these labels: none of
            # the operator's own, or it would prune what it did not create
            "metadata": {"labels": {L.ROLE: role}},
            "spec": {"replicas": deployment["spec"]["replicas"],
                     "leaderWorkerTemplate": {"size": 1, "workerTemplate": template}},
        })
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": metadata(model, model.name, "inference", owner_uid),
            "spec": {"roles": roles}}


def pod_monitor(model: LLMModel, settings: Settings, path: str, owner_uid: str | None
                ) -> dict[str, Any] | None:
    """Both roles' engines scraped on their own port (the Service reaches decode only)."""
    mon = settings.monitoring
    if mon.kind == "None":
        return None
    return {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor",
        "metadata": metadata(model, model.name, "inference", owner_uid,
                             labels=dict(mon.labels)),
        "spec": {"selector": {"matchLabels": selector_labels(model)},
                 "podMetricsEndpoints": [{"port": ENGINE_PORT_NAME, "path": path,
                                          "interval": mon.interval}],
                 "podTargetLabels": [L.MODEL_NAME, L.ROLE]},
    }
