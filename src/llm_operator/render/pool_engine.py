"""A pool's engine in a cluster (spec.pool): llama-server's router mode serving its members.

One Deployment, ConfigMap and Service per pool, named ``<pool>-pool`` and owned by every
member (garbage-collected with the last one). The ConfigMap holds the members' preset: each
loaded with the flags it would get alone, its file mounted from the node. An edit to a
member's flags changes only the preset, which the kubelet updates in the running pod and
its ``pool-reload`` container has the router read again: that member alone is unloaded.
A member added or removed (its file is one of the pod's volumes), or a change to what the
pod asks for, rolls the pod.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Sequence
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.kv_cache import mib_quantity
from llm_operator.api.pools import pool_autoscaled, pool_scaling
from llm_operator.api.v1alpha1 import API_VERSION, KIND, LLMModel
from llm_operator.api.validation import Problem
from llm_operator.profiles.engines import NON_ROOT_UID, PORT, engine
from llm_operator.profiles.kv_tier import pool_tier_mib
from llm_operator.profiles.llama_router import Member, models_preset, router_args
from llm_operator.profiles.llamaserver import Where, llama_server_args
from llm_operator.profiles.pool import POOL_RELOAD, PoolPlan, takes_turns
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.vendors import vendor
from llm_operator.render import engine_image, pool_vllm
from llm_operator.render.disruption import pods_budget
from llm_operator.render.meta import content_hash, restricted_container_security
from llm_operator.render.pool_pod import (
    CONFIG_DIR,
    GATEWAY_FILE,
    SERVER_CONTAINER,
    gateway_config,
    gateway_container,
    member_dir,
)
from llm_operator.render.weights import node_file

COMPONENT = "pool"
PRESET_FILE = "models.ini"
ENGINE_PORT = PORT + 1  # llama-server's router, where a gateway in the pod serves PORT
# A changed pool (a member added, edited or gone) replaces its pods one at a time, never
# starting a new pod beside the old: that would need its loaded members' memory and CPU (a
# vLLM pool's accelerators) twice, which a node sized for the pool does not have, and the
# rollout would wait for ever. One replica is away while its successor starts (the router
# holds its requests, as at zero); with several, the others serve.
REPLACED_IN_TURN = {"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def pool_object_name(pool: str) -> str:
    """The pool's Deployment, ConfigMap and Service."""
    return f"{pool}-pool"


def pool_labels(pool: str) -> dict[str, str]:
    """The selector of the pool's pods (and the label every pool object carries)."""
    return {L.APP: pool_object_name(pool), L.POOL: pool}


def member_problems(model: LLMModel) -> list[Problem]:
    """Why a pooled model cannot be a member in a cluster, each with its field.

    So far: its file must be on the node.
    """
    pool = model.spec.pool
    if pool is None:
        return []
    problems = []
    if not node_file(model.spec):
        problems.append(Problem(
            "spec.modelSource", "a pool's members are files on the node so far (a GGUF "
            "file, or for vLLM a model directory; modelSource.type file, an absolute path): "
            "the pool's engine mounts each one; serve this model outside the pool, or put "
            "its file on the nodes"))
    return problems


def _member_path(model: LLMModel) -> str:
    path = node_file(model.spec)
    assert path is not None  # member_problems() checked it
    return posixpath.join(member_dir(model), posixpath.basename(path))


VERIFY_PREFIX = "verify-"


def member_check(member: LLMModel) -> tuple[str, str | None]:
    """What the pool's init container checks of a member: its file, the sha256 it must have.

    The file is under the member's own directory, so a path names one member.
    """
    source = member.spec.model_source
    return _member_path(member), source.sha256 if source else None


def checked_by(container: dict[str, Any]) -> tuple[str, str | None] | None:
    """``member_check`` of the member a pool's verify container checks (None: not one)."""
    command = container.get("command") or []
    if not str(container.get("name", "")).startswith(VERIFY_PREFIX) or len(command) < 3:
        return None
    sha = command[command.index("--sha256") + 1] if "--sha256" in command[:-1] else None
    return str(command[2]), sha


def _verify(member: LLMModel, index: int, settings: Settings) -> dict[str, Any]:
    """An init container that checks one member's file: its sha256, its header.

    As a model of its own is checked. A member whose file fails is left out of the pool
    by the operator (operator/pooled.py), so that the others start without it.
    """
    _, sha = member_check(member)
    return {
        "name": f"{VERIFY_PREFIX}{index}", "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "model-verify", _member_path(member), "--markers", "/verified",
                    *(["--sha256", sha] if sha else [])],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": f"member-{index}", "mountPath": _member_path(member),
                          "readOnly": True}, {"name": "verified", "mountPath": "/verified"}],
        "securityContext": restricted_container_security(non_root=True),
    }


def _meta(pool: str, namespace: str, members: Sequence[LLMModel]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": pool_object_name(pool), "namespace": namespace,
        "labels": {**pool_labels(pool), L.K8S_NAME: "llm-pool", L.K8S_INSTANCE: pool,
                   L.K8S_COMPONENT: COMPONENT, L.K8S_MANAGED_BY: L.MANAGED_BY_VALUE}}
    owners = [{"apiVersion": API_VERSION, "kind": KIND, "name": m.name,
               "uid": m.metadata.uid, "blockOwnerDeletion": True}
              for m in members if m.metadata.uid]
    if owners:
        meta["ownerReferences"] = owners
    return meta


def preset(members: Sequence[LLMModel]) -> str:
    """The members' --models-preset file: each with its own flags, its file in the pod.

    The first ``maxLoaded`` load at start: the pinned members, then the first by name.
    """
    pool = members[0].spec.pool
    first = sorted(members, key=lambda m: not (m.spec.pool and m.spec.pool.pinned))[
        :pool.max_loaded if pool else 0]
    return models_preset([
        Member(m.spec.model_id, _member_path(m),
               llama_server_args(m.spec, Where(_member_path(m), "0.0.0.0", PORT)).args,
               load_on_startup=m in first)
        for m in members])


def pool_objects(members: Sequence[LLMModel], plan: PoolPlan, settings: Settings
                 ) -> list[dict[str, Any]]:
    """The pool's ConfigMap, Deployment and Service, from its members (in name order).

    And its PodDisruptionBudget where its members let it run two replicas or more.
    """
    first = members[0]
    pool = first.spec.pool
    assert pool is not None
    namespace = first.namespace
    meta = _meta(pool.name, namespace, members)
    if first.spec.inference_engine == "vllm":  # engines taking turns (render/pool_vllm.py)
        data = {GATEWAY_FILE: pool_vllm.gateway_config(members, pool.max_loaded),
                pool_vllm.LAUNCHER_FILE: pool_vllm.launcher(members, pool.max_loaded)}
        return _objects(meta, pool.name, members, data=data, settings=settings,
                        pod=pool_vllm.pod(members, plan, settings, pool_object_name(pool.name)))
    text = preset(members)
    turns = takes_turns(members)
    # taking turns: the router behind the pod's own gateway, which serves the pool's port
    engine_port = ENGINE_PORT if turns else PORT
    vp, eng = vendor(first.spec.accelerator_vendor), engine("llamacpp")
    image = engine_image(vp, eng.name, settings)
    assert image is not None  # each member's placement_problems() checked it
    # the loaded members' memory, and their host KV tiers (a llama-server each)
    memory = mib_quantity(math.ceil(plan.limit_gib or plan.need_gib) * 1024 + pool_tier_mib(
        [m.spec for m in members], pool.max_loaded))
    cpu = plan.cpu_millicores
    volumes: list[dict[str, Any]] = [{"name": "preset", "configMap": {
        "name": pool_object_name(pool.name)}}]
    mounts: list[dict[str, Any]] = [{"name": "preset", "mountPath": CONFIG_DIR,
                                     "readOnly": True}]
    for i, member in enumerate(members):
        path = node_file(member.spec)
        volumes.append({"name": f"member-{i}", "hostPath": {"path": path, "type": "File"}})
        mounts.append({"name": f"member-{i}", "mountPath": _member_path(member),
                       "readOnly": True})
    volumes.append({"name": "verified", "emptyDir": {}})
    init = [_verify(member, i, settings) for i, member in enumerate(members)]
    port_name = "engine" if turns else "http"
    probe = {"httpGet": {"path": "/health", "port": port_name}}
    server = {
        "name": SERVER_CONTAINER, "image": image,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["/app/llama-server"],
        "args": router_args("0.0.0.0", engine_port, posixpath.join(CONFIG_DIR, PRESET_FILE),
                            pool.max_loaded),
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": port_name, "containerPort": engine_port, "protocol": "TCP"}],
        "resources": {"requests": {"cpu": f"{cpu}m", "memory": memory},
                      "limits": {"cpu": f"{cpu}m", "memory": memory}},
        "volumeMounts": mounts,
        "startupProbe": {**probe, "periodSeconds": 1, "failureThreshold":
                         max(1, settings.startup_timeout_seconds), "timeoutSeconds": 5},
        "readinessProbe": {**probe, "periodSeconds": 10, "failureThreshold": 3,
                           "timeoutSeconds": 5},
        "livenessProbe": {**probe, "periodSeconds": 30, "failureThreshold": 5,
                          "timeoutSeconds": 10},
        "securityContext": restricted_container_security(non_root=eng.runs_as_non_root),
    }
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "securityContext": {"fsGroup": NON_ROOT_UID, "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": init, "containers": [server], "volumes": volumes}
    pod["containers"].append(_reloader(settings, engine_port, mounts[0]))
    data = {PRESET_FILE: text}
    if turns:
        data[GATEWAY_FILE] = gateway_config(
            members, [f"http://127.0.0.1:{ENGINE_PORT}/v1"] * len(members),
            group=f"pool {pool.name}", max_awake=pool.max_loaded, control="llama-router")
        pod["containers"].append(gateway_container(settings, mounts[0]))
    return _objects(meta, pool.name, members, data=data, pod=pod, settings=settings,
                    read_in_place=frozenset({PRESET_FILE}))


def _reloader(settings: Settings, engine_port: int, config_mount: dict[str, Any]
              ) -> dict[str, Any]:
    """``llmop pool-reload``: the router reads the preset again when the kubelet updates it."""
    return {
        "name": POOL_RELOAD.name, "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "pool-reload", "--preset",
                    posixpath.join(CONFIG_DIR, PRESET_FILE),
                    "--engine", f"http://127.0.0.1:{engine_port}"],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": {"cpu": f"{POOL_RELOAD.cpu_millicores}m",
                                   "memory": f"{POOL_RELOAD.memory_mib}Mi"},
                      "limits": {"memory": f"{POOL_RELOAD.limit_mib}Mi"}},
        "volumeMounts": [config_mount],
        "securityContext": restricted_container_security(non_root=True),
    }


def _objects(meta: dict[str, Any], pool: str, members: Sequence[LLMModel], *,
             data: dict[str, str], pod: dict[str, Any], settings: Settings,
             read_in_place: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The ConfigMap (``data``), Deployment (``pod``), Service and budget of a pool.

    The pod template carries the hash of ``data`` but for the files the pod reads again
    when they change (``read_in_place``): any other change rolls the pod.
    """
    if settings.images.pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in settings.images.pull_secrets]
    text = "\n".join(v for k, v in sorted(data.items()) if k not in read_in_place)
    template = {"metadata": {"labels": dict(meta["labels"]),
                             "annotations": {L.CONFIG_HASH: content_hash(text)}},
                "spec": pod}
    # the autoscaler's to set where the members' bounds leave a choice (not applied, so
    # that a member's reconcile never undoes it); else the bound
    scaling = pool_scaling(members)
    replicas = {} if pool_autoscaled(members) else {"replicas": scaling.min_replicas}
    # a drain never takes the pool's last pod while another is unready (as a model's)
    budget = [pods_budget(meta, pool_labels(pool))] if scaling.max_replicas >= 2 else []
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {**replicas, "revisionHistoryLimit": 3, "strategy": REPLACED_IN_TURN,
                  "selector": {"matchLabels": pool_labels(pool)},
                  "template": template}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"type": "ClusterIP", "selector": pool_labels(pool),
                  "ports": [{"name": "http", "port": PORT, "targetPort": "http",
                             "protocol": "TCP"}]}},
        *budget,
    ]


def pool_endpoint(model: LLMModel, settings: Settings) -> str:
    """A member's OpenAI base URL in the cluster: its pool's Service."""
    assert model.spec.pool is not None
    host = f"{pool_object_name(model.spec.pool.name)}.{model.namespace}.svc." \
        f"{settings.cluster_domain}"
    return f"http://{host}:{PORT}/v1"
