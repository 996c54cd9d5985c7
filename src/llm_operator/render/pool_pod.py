"""What every model pool's pod has, whichever engine serves it: names, mounts, its gateway."""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Any

import yaml

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import PORT
from llm_operator.profiles.pool import POOL_GATEWAY, sleep_settings
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import restricted_container_security

CONFIG_DIR = "/etc/llmop-pool"  # the pool's ConfigMap: llama.cpp's preset, vLLM's launcher
MEMBERS_DIR = "/models"
SERVER_CONTAINER = "pool-server"  # the engine's container: its log says why a load failed
GATEWAY_FILE = "gateway.yaml"  # the pool-gateway's config, where members take turns under it


def gateway_config(members: Sequence[LLMModel], base_urls: Sequence[str], *, group: str,
                   max_awake: int, control: str | None = None, port: int = PORT) -> str:
    """The pool-gateway's config: a route per member, one sleep group, the pool's port.

    Each member's route goes to its engine at ``base_urls`` (in the same order).
    """
    routes = []
    for member, url in zip(members, base_urls, strict=True):
        assert member.spec.pool is not None
        routes.append({"name": member.spec.model_id, "models": [member.spec.model_id],
                       "upstream": {"baseUrl": url, "auth": "none"},
                       "sleep": sleep_settings(member.spec.pool, group, max_awake, control)})
    return yaml.safe_dump({"listen": {"host": "0.0.0.0", "port": port},
                           "flowControl": {"enabled": False},  # the router's to do
                           "routes": routes}, sort_keys=False)


def gateway_container(settings: Settings, config_mount: dict[str, Any]) -> dict[str, Any]:
    """The pool's own `llmop gateway` on its port: members taking turns (a sleep group)."""
    def health() -> dict[str, Any]:  # one dict each: YAML would anchor a shared one
        return {"httpGet": {"path": "/health", "port": "http"}}

    return {
        "name": POOL_GATEWAY.name, "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "gateway", "--config", posixpath.join(CONFIG_DIR, GATEWAY_FILE)],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": f"{POOL_GATEWAY.cpu_millicores}m",
                                   "memory": f"{POOL_GATEWAY.memory_mib}Mi"},
                      "limits": {"memory": f"{POOL_GATEWAY.limit_mib}Mi"}},
        "volumeMounts": [config_mount],
        "readinessProbe": {**health(), "periodSeconds": 10},
        "livenessProbe": {**health(), "periodSeconds": 30, "failureThreshold": 5},
        "securityContext": restricted_container_security(non_root=True),
    }


def member_dir(member: LLMModel) -> str:
    """Where a member's file (or model directory) is mounted in the pool's pod."""
    return posixpath.join(MEMBERS_DIR, member.name)
