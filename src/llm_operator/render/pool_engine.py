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
from llm_operator.api.v1alpha1 import API_VERSION, KIND, LLMModel, LLMModelSpec
from llm_operator.api.validation import Problem
from llm_operator.profiles.engines import NON_ROOT_UID, PORT, engine
from llm_operator.profiles.kv_tier import pool_tier_mib
from llm_operator.profiles.llama_router import Member, models_preset, router_args
from llm_operator.profiles.llamaserver import Where, llama_server_args
from llm_operator.profiles.planner import plan
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
from llm_operator.render.weights import downloads, node_file
from llm_operator.render.workload import (
    fetch_container,
    gguf_patterns,
    model_cache_claim,
    model_fetch,
)

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


def fetched(spec: LLMModelSpec, settings: Settings) -> bool:
    """A member whose GGUF file the pool's pod downloads from Hugging Face.

    Not yet from S3 or an OCI artifact: their tools do not say why a download failed in
    the container's termination message, which the operator reads to leave such a member
    out of its pool rather than keep every member from starting.
    """
    source = spec.model_source
    return (source is None or source.type == "huggingface") and downloads(spec, settings)


def member_problems(model: LLMModel, settings: Settings) -> list[Problem]:
    """Why a pooled model cannot be a member in a cluster, each with its field.

    A file on the node, or for llama.cpp a download into the member's own cache claim.
    """
    spec = model.spec
    if model.spec.pool is None or node_file(spec) or (
            spec.inference_engine == "llamacpp" and fetched(spec, settings)):
        return []
    what = ("a GGUF file on the node (modelSource.type file, an absolute path) or a "
            "download from Hugging Face"
            if spec.inference_engine == "llamacpp" else
            "model directories on the node (modelSource.type file, an absolute path)")
    return [Problem("spec.modelSource", f"a pool's {spec.inference_engine} members are {what} "
                    "so far: the pool's pod mounts each one; serve this model outside the "
                    "pool, or put its weights on the nodes")]


LINK = "model.gguf"  # a downloaded member's file, linked by its check to what it picked
SOURCE = "source"  # where a downloaded member's files go, in its directory


def _member_path(model: LLMModel) -> str:
    """The member's GGUF file in the pool's pod (a downloaded one's: the link to it)."""
    path = node_file(model.spec)
    return posixpath.join(member_dir(model), posixpath.basename(path) if path else LINK)


def member_cache_name(member: LLMModel) -> str:
    """A downloaded member's cache claim (not its own model's: that one a pool prunes)."""
    return f"{member.name}-pool-cache"


VERIFY_PREFIX = "verify-"


def member_check(member: LLMModel) -> tuple[str, str | None]:
    """What the pool's init container checks of a member: its file, the sha256 it must have.

    The file is under the member's own directory, so a path names one member.
    """
    source = member.spec.model_source
    return _member_path(member), source.sha256 if source else None


FETCH_PREFIX = "fetch-"


def _after(command: list[Any], flag: str) -> str | None:
    return str(command[command.index(flag) + 1]) if flag in command[:-1] else None


def checked_by(container: dict[str, Any]) -> tuple[str, str | None] | None:
    """``member_check`` of the member a pool's verify container checks (None: not one)."""
    command = container.get("command") or []
    if not str(container.get("name", "")).startswith(VERIFY_PREFIX) or len(command) < 3:
        return None
    return _after(command, "--link") or str(command[2]), _after(command, "--sha256")


def fetched_for(container: dict[str, Any]) -> str | None:
    """The member file (``member_check``'s path) a pool's fetch container downloads."""
    if not str(container.get("name", "")).startswith(FETCH_PREFIX):
        return None
    mounts = container.get("volumeMounts") or [{}]
    return posixpath.join(str(mounts[0].get("mountPath", "")), LINK)


def _verify(member: LLMModel, index: int, settings: Settings) -> dict[str, Any]:
    """An init container that checks one member's file: its sha256, its header.

    As a model of its own is checked; a downloaded member's check picks the file of its
    quantization and links it where the preset names it. A member whose file fails is left
    out of the pool by the operator (operator/pooled.py), so that the others start
    without it.
    """
    path, sha = member_check(member)
    mount: dict[str, Any]
    if fetched(member.spec, settings):
        # the file of its quantization: the claim outlives edits, and earlier files in it
        what = ["--dir", posixpath.join(member_dir(member), SOURCE),
                *(a for g in gguf_patterns(member.spec) for a in ("--include", g)),
                "--link", path]
        mount = {"name": f"member-{index}", "mountPath": member_dir(member)}
    else:
        what = [path]
        mount = {"name": f"member-{index}", "mountPath": path, "readOnly": True}
    return {
        "name": f"{VERIFY_PREFIX}{index}", "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "model-verify", *what, "--markers", "/verified",
                    *(["--sha256", sha] if sha else [])],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
        "volumeMounts": [mount, {"name": "verified", "mountPath": "/verified"}],
        "securityContext": restricted_container_security(non_root=True),
    }


def _fetch(member: LLMModel, index: int, settings: Settings) -> dict[str, Any]:
    """An init container that downloads one member's file into its own cache claim.

    As a model of its own downloads (the tools skip what is complete: a new pod of the
    pool fetches nothing again).
    """
    fetch = model_fetch(member.spec, engine("llamacpp"),
                        posixpath.join(member_dir(member), SOURCE))
    container = fetch_container(fetch, settings, name=f"{FETCH_PREFIX}{index}")
    container["volumeMounts"] = [{"name": f"member-{index}", "mountPath": member_dir(member)}]
    return container


def _member_cache(member: LLMModel, pool: str, settings: Settings) -> dict[str, Any]:
    """A downloaded member's cache claim, owned by the member alone.

    So that the download outlives the pool's rollouts and goes with the member.
    """
    size = plan(member, settings.storage.min_size_gi_b).cache_size_gib
    meta = _meta(pool, member.namespace, [member])
    meta["name"] = member_cache_name(member)
    # the member's child: pruned by its own reconcile once it is no downloaded member
    meta["labels"][L.MODEL_NAME] = member.name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
            "spec": model_cache_claim(size, settings.storage)["spec"]}


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
    init: list[dict[str, Any]] = []
    claims: list[dict[str, Any]] = []
    for i, member in enumerate(members):
        if fetched(member.spec, settings):
            claims.append(_member_cache(member, pool.name, settings))
            volumes.append({"name": f"member-{i}", "persistentVolumeClaim": {
                "claimName": member_cache_name(member)}})
            mounts.append({"name": f"member-{i}", "mountPath": member_dir(member),
                           "readOnly": True})
            init.append(_fetch(member, i, settings))
        else:
            volumes.append({"name": f"member-{i}", "hostPath": {
                "path": node_file(member.spec), "type": "File"}})
            mounts.append({"name": f"member-{i}", "mountPath": _member_path(member),
                           "readOnly": True})
        init.append(_verify(member, i, settings))
    volumes.append({"name": "verified", "emptyDir": {}})
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
    return [*_objects(meta, pool.name, members, data=data, pod=pod, settings=settings,
                      read_in_place=frozenset({PRESET_FILE})), *claims]


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
