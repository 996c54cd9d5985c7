"""LoRA adapters in the pod: the lora-sync sidecar, its adapter list, the mounted claims."""

from __future__ import annotations

import json
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.profiles import adapters as A
from llm_operator.profiles.engines import CACHE_DIR, PORT
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import hub_env, metadata, restricted_container_security

SIDECAR = "lora-sync"
CONFIG_VOLUME = "lora-adapters"


def config_map_name(model: LLMModel) -> str:
    return f"{model.name}-lora-adapters"


def synced(spec: LLMModelSpec) -> bool:
    """True for vLLM with adapters: a sidecar keeps them loaded, following a ConfigMap."""
    return spec.inference_engine == "vllm" and bool(spec.lora_adapters)


def config_map(model: LLMModel, component: str, owner_uid: str | None) -> dict[str, Any]:
    """The adapter list lora-sync follows; the kubelet updates the mounted file in place."""
    entries = A.sync_entries(model.spec)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(model, config_map_name(model), component, owner_uid),
        "data": {A.SYNC_CONFIG_KEY: json.dumps(entries, indent=2, sort_keys=True) + "\n"},
    }


def claim_volumes(spec: LLMModelSpec) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, the engine's mounts) for the claims pvc adapters live on, read-only."""
    volumes, mounts = [], []
    for claim in A.claims(spec):
        name = A.claim_volume(claim)
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": claim,
                                                                 "readOnly": True}})
        mounts.append({"name": name, "mountPath": f"{A.CLAIM_DIR}/{claim}", "readOnly": True})
    return volumes, mounts


def sidecar(model: LLMModel, settings: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the lora-sync container, its ConfigMap volume).

    It downloads Hugging Face adapters into the model cache and loads and unloads adapters
    through vLLM's API to match the ConfigMap. Ready once every adapter was tried.
    """
    secrets = sorted({a.source.hugging_face_token_secret for a in model.spec.lora_adapters or ()
                      if a.source.type == "huggingface" and a.source.hugging_face_token_secret})
    env = [{"name": "HOME", "value": "/tmp"}, *hub_env(settings.hugging_face_endpoint)]
    env += [{"name": A.hf_token_env(s), "valueFrom": {"secretKeyRef": {"name": s,
                                                                        "key": "token"}}}
            for s in secrets]
    container = {
        "name": SIDECAR,
        "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "lora-sync", "--config", f"{A.SYNC_CONFIG_DIR}/{A.SYNC_CONFIG_KEY}",
                    "--engine", f"http://127.0.0.1:{PORT}", "--port", str(A.SYNC_PORT)],
        "env": env,
        "ports": [{"name": SIDECAR, "containerPort": A.SYNC_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": SIDECAR},
                           "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 3},
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "512Mi"}},
        "volumeMounts": [{"name": "model-cache", "mountPath": CACHE_DIR},
                         {"name": CONFIG_VOLUME, "mountPath": A.SYNC_CONFIG_DIR,
                          "readOnly": True}],
        "securityContext": restricted_container_security(non_root=True),
    }
    volume = {"name": CONFIG_VOLUME, "configMap": {"name": config_map_name(model)}}
    return container, volume
