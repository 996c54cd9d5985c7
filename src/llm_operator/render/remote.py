"""Remote models: the gateway's config (ConfigMap) and its Deployment."""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlsplit

import yaml

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import NON_ROOT_UID, PORT
from llm_operator.profiles.pricing import price
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import (
    CONTROL_PLANE_CLASS,
    child_labels,
    config_map_name,
    content_hash,
    metadata,
    pod_metadata,
    restricted_container_security,
    selector_labels,
)

COMPONENT = "gateway"
CONFIG_DIR = "/etc/llmop"
CONFIG_FILE = "gateway.yaml"
KEY_DIR = "/var/run/secrets/llmop/upstream"
KEY_FILE = "apiKey"


def gateway_route(model: LLMModel, replicas: int, api_key: dict[str, str]) -> dict[str, Any]:
    """The gateway route of a remote model: its id -> its upstream, with ``api_key``'s source.

    The rate limit is the model's limit split across ``replicas`` gateways, so the whole
    service honours rateLimitRpm (1 when the replicas share it in Redis).
    """
    api = model.spec.remote_api
    assert api is not None
    route: dict[str, Any] = {
        "models": [model.spec.model_id],
        "upstream": {"baseUrl": api.base_url, "model": model.spec.model_id, "apiKey": api_key,
                     **({"api": api.api} if api.api != "openai" else {})},
    }
    if api.rate_limit_rpm:
        per_replica = max(1, math.floor(api.rate_limit_rpm / replicas))
        route["rateLimit"] = {"requestsPerMinute": per_replica}
    known = price(model.spec.model_id)
    if known:
        route["pricing"] = {"inputPerMillion": known[0], "outputPerMillion": known[1]}
    owner = owned_by(model)
    if owner:
        route["ownedBy"] = owner
    return route


def owned_by(model: LLMModel) -> str | None:
    """Who publishes the model, for /v1/models: its ai.example.io/vendor label."""
    return (model.metadata.labels or {}).get(L.VENDOR)


REDIS_DIR = "/var/run/secrets/llmop/redis"
REDIS_PORT = 6379


def gateway_config(model: LLMModel, settings: Settings) -> dict[str, Any]:
    """One route, its key read from the mounted Secret file; limits in Redis if configured.

    With Redis the whole limit is shared; each replica falls back to its part of it while
    Redis is down.
    """
    gw = settings.gateway
    shared = gw.redis_url is not None
    route = gateway_route(model, 1 if shared else gw.replicas,
                          {"file": f"{KEY_DIR}/{KEY_FILE}"})
    config: dict[str, Any] = {"listen": {"host": "0.0.0.0", "port": PORT}}
    if gw.redis_url is not None:
        config["redis"] = {"url": gw.redis_url, "localShare": round(1 / gw.replicas, 6),
                           **({"passwordFile": f"{REDIS_DIR}/password"}
                              if gw.redis_password_secret else {})}
    return {**config, "routes": [route]}


def config_map(model: LLMModel, settings: Settings, owner_uid: str | None) -> dict[str, Any]:
    text = yaml.safe_dump(gateway_config(model, settings), sort_keys=False)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(model, config_map_name(model), COMPONENT, owner_uid),
        "data": {CONFIG_FILE: text},
    }


def gateway_deployment(
    model: LLMModel, config: dict[str, Any], settings: Settings, owner_uid: str | None
) -> dict[str, Any]:
    api = model.spec.remote_api
    assert api is not None
    labels = {L.MODE: "remote-proxy"}
    template_labels = {**child_labels(model, COMPONENT), **labels}
    container = {
        "name": "gateway",
        "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "args": ["gateway", "--config", f"{CONFIG_DIR}/{CONFIG_FILE}"],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"cpu": "500m", "memory": "256Mi"}},
        "volumeMounts": [
            {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
            {"name": "api-key", "mountPath": KEY_DIR, "readOnly": True},
            *([{"name": "redis", "mountPath": REDIS_DIR, "readOnly": True}]
              if settings.gateway.redis_password_secret else []),
        ],
        # every second until the process answers, then readiness at once (the kubelet
        # probes it when the startup probe passes): Ready as soon as it serves. /health,
        # not /ready: a missing key keeps the pod unready, saying why, not restarting
        "startupProbe": {"httpGet": {"path": "/health", "port": "http"},
                         "periodSeconds": 1, "failureThreshold": 60, "timeoutSeconds": 2},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"},
                           "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": "http"},
                          "periodSeconds": 20, "failureThreshold": 3, "timeoutSeconds": 2},
        "securityContext": {**restricted_container_security(non_root=True),
                            "readOnlyRootFilesystem": True},
    }
    proxy = settings.gateway.egress_proxy
    if proxy is not None:  # docs/gateway.md "Egress proxies"
        container["env"] = [{"name": "HTTPS_PROXY", "value": proxy},
                            {"name": "HTTP_PROXY", "value": proxy},
                            {"name": "NO_PROXY", "value": ",".join(settings.gateway.no_proxy)}]
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "fsGroup": NON_ROOT_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector_labels(model)},
        }],
        "volumes": [
            {"name": "config", "configMap": {"name": config_map_name(model)}},
            {"name": "api-key", "secret": {"secretName": api.api_key_secret,
                                           "items": [{"key": "apiKey", "path": KEY_FILE}]}},
            *([{"name": "redis", "secret": {
                "secretName": settings.gateway.redis_password_secret,
                "items": [{"key": "password", "path": "password"}]}}]
              if settings.gateway.redis_password_secret else []),
        ],
    }
    if settings.scheduling.priority_classes:  # a model on a full node never preempts it
        pod["priorityClassName"] = CONTROL_PLANE_CLASS
    if settings.images.pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in settings.images.pull_secrets]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(model, model.name, COMPONENT, owner_uid, labels=labels),
        "spec": {
            "replicas": settings.gateway.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(model)},
            "template": {
                "metadata": pod_metadata(model, template_labels, {
                    L.CONFIG_HASH: content_hash(config["data"]), L.PROMETHEUS_SCRAPE: "true",
                    L.PROMETHEUS_PORT: str(PORT), L.PROMETHEUS_PATH: "/metrics"}),
                "spec": pod,
            },
        },
    }


def network_policy(model: LLMModel, owner_uid: str | None, settings: Settings
                   ) -> dict[str, Any]:
    """Who may reach the gateway (it spends the provider key) and where it may connect.

    Ingress: pods labelled as LLM clients in any namespace, the MCP server, and Prometheus.
    Egress: DNS, the provider's port (any address: provider IPs are not stable), the
    egress proxy's port when there is one, and Redis's port when limits are shared there.
    """
    api = model.spec.remote_api
    assert api is not None
    parts = urlsplit(api.base_url)
    ports = [parts.port or (443 if parts.scheme == "https" else 80)]
    proxy_port = settings.gateway.egress_proxy_port
    if proxy_port is not None:  # the proxy's too (the provider's stays: noProxy hosts)
        ports.append(proxy_port)
    if settings.gateway.redis_url is not None:
        ports.append(urlsplit(settings.gateway.redis_url).port or REDIS_PORT)
    http = [{"protocol": "TCP", "port": PORT}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(model, f"{model.name}-gateway", COMPONENT, owner_uid),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(model)},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [
                {"from": [{"namespaceSelector": {},
                           "podSelector": {"matchLabels": {L.LLM_CLIENT: "true"}}},
                          {"namespaceSelector": {},
                           "podSelector": {"matchLabels": {"app": "mcp-server"}}},
                          {"namespaceSelector": {},
                           "podSelector": {"matchLabels": {"app": "llmop-router"}}},
                          {"namespaceSelector": {"matchLabels": {
                              "kubernetes.io/metadata.name":
                                  settings.gateway.prometheus_namespace}}}],
                 "ports": http},
            ],
            "egress": [
                {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
                {"ports": [{"protocol": "TCP", "port": p} for p in sorted(set(ports))]},
            ],
        },
    }
