"""The endpoint picker an InferencePool names: its Deployment, Service, RBAC and plugins.

One picker per pool, as llm-d deploys it: the Gateway API Inference Extension's EPP
(`--pool-name`, `--pool-namespace`, its plugin file), which the inference gateway asks over
ext-proc (gRPC, port 9002) which replica gets each request. It scrapes the pool's pods for
their queue and KV-cache use, and scores them with the plugins in the settings
(`inferencePool.endpointPicker.scorers`: queue depth, KV-cache utilization, prefix-cache
affinity by default). Its pods carry none of the model's selector labels, so neither the
model's Service, nor its pool, nor its status counts them.
"""

from __future__ import annotations

from typing import Any

import yaml

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import (
    CONTROL_PLANE_CLASS,
    content_hash,
    metadata,
    restricted_container_security,
)

COMPONENT = "endpoint-picker"
GRPC_PORT, HEALTH_PORT, METRICS_PORT = 9002, 9003, 9090
CONFIG_DIR, CONFIG_FILE = "/config", "default-plugins.yaml"
CONFIG_API = "inference.networking.x-k8s.io/v1alpha1"
POOL_GROUP = "inference.networking.k8s.io"
# SGLang's names for what the picker reads from vLLM by default.
SGLANG_METRICS = (
    ("total-queued-requests-metric", "sglang:num_queue_reqs"),
    ("total-running-requests-metric", "sglang:num_running_reqs"),
    ("kv-cache-usage-percentage-metric", "sglang:token_usage"),
    ("lora-info-metric", ""),  # SGLang exports no LoRA info: do not look for it
)


def picker_name(model: LLMModel, settings: Settings) -> str:
    return settings.inference_pool.endpoint_picker.service.replace("{name}", model.name)


def plugins_config(settings: Settings, disaggregated: bool = False) -> str:
    """The EndpointPickerConfig: the scorers with their weights (weight 0 leaves one out).

    Disaggregated (llm-d's inference scheduler): a decode profile and a prefill profile,
    each filtered to its role's pods (label llm-d.ai/role) and scored alike; the decider
    sends a request to a prefill pod when its prompt is not already mostly cached on the
    chosen decode pod, and the headers handler tells the decode pod's sidecar which.
    """
    weights = {k: w for k, w in settings.inference_pool.endpoint_picker.scorers.items() if w}
    scored = [{"pluginRef": scorer, "weight": weight} for scorer, weight in weights.items()]
    config: dict[str, Any] = {"apiVersion": CONFIG_API, "kind": "EndpointPickerConfig"}
    if disaggregated:  # the decider reads the prefix-cache match data plugins prepare
        config["featureGates"] = ["prepareDataPlugins"]
    config["plugins"] = [{"type": scorer} for scorer in weights]
    config["schedulingProfiles"] = [{"name": "default", "plugins": scored}]
    if disaggregated:
        config["plugins"] += [
            {"type": "prefill-filter"}, {"type": "decode-filter"},
            {"type": "max-score-picker"}, {"type": "disagg-headers-handler"},
            {"type": "prefix-based-pd-decider", "parameters": {"nonCachedTokens": 16}},
            {"type": "disagg-profile-handler",
             "parameters": {"deciders": {"prefill": "prefix-based-pd-decider"}}}]
        config["schedulingProfiles"] = [
            {"name": role, "plugins": [{"pluginRef": f"{role}-filter"},
                                       {"pluginRef": "max-score-picker"}, *scored]}
            for role in ("prefill", "decode")]
    return yaml.safe_dump(config, sort_keys=False)


def _disaggregated(model: LLMModel) -> bool:
    return bool(model.spec.serving and model.spec.serving.disaggregation)


def _pod_labels(model: LLMModel, settings: Settings) -> dict[str, str]:
    return {L.APP: picker_name(model, settings), L.K8S_NAME: COMPONENT,
            L.K8S_INSTANCE: model.name}


def picker_objects(model: LLMModel, settings: Settings, owner_uid: str | None
                   ) -> list[dict[str, Any]]:
    """ServiceAccount, Role, RoleBinding, ConfigMap, Deployment and Service, in apply order."""
    name = picker_name(model, settings)
    meta = metadata(model, name, COMPONENT, owner_uid)
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
              "data": {CONFIG_FILE: plugins_config(settings, _disaggregated(model))}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta,
         "automountServiceAccountToken": True},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta,
         "rules": [
             {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
             {"apiGroups": [POOL_GROUP], "resources": ["inferencepools"],
              "verbs": ["get", "list", "watch"]},
             {"apiGroups": ["inference.networking.x-k8s.io"],
              "resources": ["inferenceobjectives", "inferencemodelrewrites"],
              "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": model.namespace}],
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}},
        config,
        _deployment(model, settings, meta, content_hash(config["data"])),
        {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": {
            "selector": {L.APP: name},
            "ports": [
                {"name": "grpc-ext-proc",  # the port the pool's endpointPickerRef names
                 "port": settings.inference_pool.endpoint_picker.port, "targetPort": "grpc",
                 "protocol": "TCP", "appProtocol": "http2"},
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": "metrics",
                 "protocol": "TCP"}]}},
    ]


def _args(model: LLMModel) -> list[str]:
    args = ["--pool-name", model.name, "--pool-namespace", model.namespace,
            "--pool-group", POOL_GROUP, "--config-file", f"{CONFIG_DIR}/{CONFIG_FILE}",
            "--grpc-port", str(GRPC_PORT), "--grpc-health-port", str(HEALTH_PORT),
            "--metrics-port", str(METRICS_PORT), "--zap-encoder", "json"]
    if model.spec.inference_engine == "sglang":
        args += [f"--{flag}={metric}" for flag, metric in SGLANG_METRICS]
    return args


def _deployment(model: LLMModel, settings: Settings, meta: dict[str, Any], digest: str
                ) -> dict[str, Any]:
    picker = settings.inference_pool.endpoint_picker
    probe = {"grpc": {"port": HEALTH_PORT, "service": "inference-extension"}}
    env = [{"name": key, "valueFrom": {"fieldRef": {"fieldPath": path}}}
           for key, path in (("NAMESPACE", "metadata.namespace"),
                             ("POD_NAME", "metadata.name"))]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            "replicas": 1,
            # one active picker (its prefix-cache index lives in memory); a new one replaces
            # it at once rather than running beside it
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": {L.APP: meta["name"]}},
            "template": {
                "metadata": {"labels": _pod_labels(model, settings),
                             "annotations": {L.CONFIG_HASH: digest}},
                "spec": {
                    "serviceAccountName": meta["name"],
                    **({"priorityClassName": CONTROL_PLANE_CLASS}
                       if settings.scheduling.priority_classes else {}),
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532,
                                        "runAsGroup": 65532,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "epp",
                        "image": settings.disaggregation.picker_image
                        if _disaggregated(model) else picker.image,
                        "imagePullPolicy": settings.images.pull_policy,
                        "args": _args(model),
                        "env": env,
                        "ports": [
                            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
                            {"name": "grpc-health", "containerPort": HEALTH_PORT,
                             "protocol": "TCP"},
                            {"name": "metrics", "containerPort": METRICS_PORT,
                             "protocol": "TCP"}],
                        "readinessProbe": {**probe, "periodSeconds": 2},
                        "livenessProbe": {**probe, "initialDelaySeconds": 5,
                                          "periodSeconds": 10},
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                      "limits": {"memory": "512Mi"}},
                        "volumeMounts": [{"name": "plugins", "mountPath": CONFIG_DIR,
                                          "readOnly": True}],
                        "securityContext": restricted_container_security(non_root=True),
                    }],
                    "volumes": [{"name": "plugins", "configMap": {"name": meta["name"]}}],
                },
            },
        },
    }
