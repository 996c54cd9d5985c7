"""Local models: the model-cache PVC and the inference Deployment (fetch, prepare, serve)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.lora import LoraAdapterSpec
from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.profiles import adapters
from llm_operator.profiles.engines import (
    CACHE_DIR,
    CHOSEN_GGUF,
    NON_ROOT_UID,
    OLLAMA_MODELS_DIR,
    PORT,
    SOURCE_DIR,
    EngineProfile,
    prepare_script,
    serve,
)
from llm_operator.profiles.settings import Settings, Storage
from llm_operator.profiles.vendors import VendorProfile
from llm_operator.render import accelerators, claims
from llm_operator.render import adapters as lora
from llm_operator.render.compile_cache import compile_cache
from llm_operator.render.meta import (
    child_labels,
    hub_env,
    metadata,
    pod_metadata,
    pvc_name,
    restricted_container_security,
    selector_labels,
)
from llm_operator.render.weights import (
    CACHE_VOLUME,
    cache_mounts,
    cache_volumes,
    modelcar,
    origin,
    reader_non_root,
    wants_gguf,
)

COMPONENT = "inference"
SERVER_CONTAINER = "inference-server"
TERMINATION_LOG = "/dev/termination-log"
PRIORITY_CLASS_PREFIX = "llmop-"  # config/priority ships llmop-batch ... llmop-critical
SHM_SINGLE, SHM_MULTI = "16Gi", "64Gi"
GRACE_AFTER_DRAIN = 10  # seconds the engine gets to stop after SIGTERM, before SIGKILL


def model_cache_claim(size_gib: int, storage: Storage) -> dict[str, Any]:
    """The cache's claim (name and spec): the PVC's, or a LeaderWorkerSet's claim template."""
    spec: dict[str, Any] = {
        "accessModes": [storage.access_mode],
        "resources": {"requests": {"storage": f"{size_gib}Gi"}},
    }
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return {"metadata": {"name": CACHE_VOLUME}, "spec": spec}


def model_cache_pvc(
    model: LLMModel, size_gib: int, settings: Settings, owner_uid: str | None
) -> dict[str, Any]:
    claim = model_cache_claim(size_gib, settings.storage)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata(model, pvc_name(model), COMPONENT, owner_uid),
        "spec": claim["spec"],
    }


def gguf_patterns(spec: LLMModelSpec) -> list[str]:
    """The names of the model's quantization's GGUF files (what a download takes)."""
    tag = spec.quantization.removeprefix("GGUF-")
    return [f"*{tag}*.gguf", f"*{tag.lower()}*.gguf"]


@dataclass(frozen=True)
class Fetch:
    """What one download step fetches, from where, to where (the model or an adapter)."""

    kind: str  # huggingface, s3 or oci
    dest: str
    repo: str | None = None
    token_secret: str | None = None
    bucket: str | None = None
    prefix: str | None = None
    credentials_secret: str | None = None
    oci_image: str | None = None
    includes: tuple[str, ...] = ()  # only these files (GGUF); otherwise the whole source


def model_fetch(spec: LLMModelSpec, eng: EngineProfile, dest: str = SOURCE_DIR) -> Fetch:
    """What downloading the model's weights takes (into ``dest``)."""
    source = spec.model_source
    includes = tuple(gguf_patterns(spec)) if wants_gguf(spec, eng) else ()
    if source is None or source.type == "huggingface":
        return Fetch("huggingface", dest, repo=spec.model_id, includes=includes,
                     token_secret=source.hugging_face_token_secret if source else None)
    return Fetch(source.type, dest, bucket=source.s3_bucket, prefix=source.s3_prefix,
                 credentials_secret=source.s3_credentials_secret,
                 oci_image=source.oci_image, includes=includes)


def _adapter_fetch(adapter: LoraAdapterSpec, gguf: bool) -> Fetch:
    source = adapter.source
    return Fetch(source.type, adapters.download_dir(adapter), repo=source.repo,
                 token_secret=source.hugging_face_token_secret, bucket=source.s3_bucket,
                 prefix=source.s3_prefix, credentials_secret=source.s3_credentials_secret,
                 oci_image=source.oci_image, includes=("*.gguf",) if gguf else ())


def fetch_container(fetch: Fetch, settings: Settings, name: str = "model-fetch"
                    ) -> dict[str, Any]:
    """Init container that downloads into the cache, bounded by a timeout.

    Idempotent: every tool skips files that are already complete, so a restarted pod does
    not download again.
    """
    env: list[dict[str, Any]] = [{"name": "HOME", "value": "/tmp"}]
    env_from: list[dict[str, Any]] = []
    if fetch.kind == "huggingface":
        assert fetch.repo is not None
        image = settings.images.operator
        tool = ["llmop", "model-fetch", fetch.repo, "--dest", fetch.dest]
        if fetch.includes:
            tool += [a for p in fetch.includes for a in ("--include", p)]
        elif fetch.dest == SOURCE_DIR:
            tool += ["--exclude", "original/*", "--exclude", "*.pth"]
        env += hub_env(settings.hugging_face_endpoint)
        if fetch.token_secret:
            tool += ["--token-secret", fetch.token_secret]
            env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": fetch.token_secret, "key": "token"}}})
    elif fetch.kind == "s3":
        assert fetch.bucket is not None
        image = settings.images.s3_downloader
        prefix = (fetch.prefix or "").strip("/")
        url = f"s3://{fetch.bucket}/{prefix}" if prefix else f"s3://{fetch.bucket}"
        tool = ["aws", "s3", "sync", url, fetch.dest, "--only-show-errors"]
        if fetch.includes:
            tool += ["--exclude", "*", *[a for p in fetch.includes for a in ("--include", p)]]
        if fetch.credentials_secret:
            env_from.append({"secretRef": {"name": fetch.credentials_secret}})
    else:
        assert fetch.oci_image is not None
        image = settings.images.oci_downloader
        tool = ["oras", "pull", fetch.oci_image, "--output", fetch.dest]
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["timeout", str(settings.download_timeout_seconds), *tool],
        "env": env,
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                      "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_DIR}],
        "securityContext": restricted_container_security(non_root=True),
    }
    if env_from:
        container["envFrom"] = env_from
    return container


def adapter_fetch_containers(spec: LLMModelSpec, settings: Settings) -> list[dict[str, Any]]:
    """Init containers for the adapters fetched at pod start.

    llama.cpp and SGLang load every adapter at start, so all of them (but pvc ones, which
    are mounted). vLLM's lora-sync downloads Hugging Face adapters while the pod runs; s3 and
    oci ones are fetched here (so adding one restarts the pods).
    """
    gguf = spec.inference_engine == "llamacpp"
    at_start = spec.inference_engine != "vllm"  # vLLM's lora-sync fetches Hugging Face ones
    kinds = {"huggingface", "s3", "oci"} if at_start else {"s3", "oci"}
    return [fetch_container(_adapter_fetch(a, gguf), settings, name=f"lora-fetch-{i}")
            for i, a in enumerate(spec.lora_adapters or ()) if a.source.type in kinds]


VERIFY_CONTAINER = "model-verify"
# Where model-verify notes digests it computed when the file's own directory is read-only (a
# node file): the cache volume outlives the init container's retries.
VERIFIED_DIR = f"{CACHE_DIR}/.llmop-verified"


def verify_container(spec: LLMModelSpec, settings: Settings) -> dict[str, Any]:
    """Init container (the operator's image) that checks the downloaded GGUF file.

    It picks the file, checks it against modelSource.sha256 and reads its header; the
    operator reads the result from the container's termination message into status.model.
    """
    sha = spec.model_source.sha256 if spec.model_source else None
    return {
        "name": VERIFY_CONTAINER,
        "image": settings.images.operator,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["llmop", "model-verify", "--dir", SOURCE_DIR, "--choose", CHOSEN_GGUF,
                    "--markers", VERIFIED_DIR, "--termination-log", TERMINATION_LOG,
                    *(["--sha256", sha] if sha else [])],
        "env": [{"name": "HOME", "value": "/tmp"}],
        "terminationMessagePath": TERMINATION_LOG,
        "resources": {"requests": {"cpu": "250m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
        "volumeMounts": cache_mounts(spec, settings),
        "securityContext": restricted_container_security(
            non_root=reader_non_root(spec, settings)),
    }


def prepare_container(spec: LLMModelSpec, image: str, settings: Settings) -> dict[str, Any] | None:
    """Init container in the engine image: link the GGUF file, or import it into Ollama."""
    script = prepare_script(spec)
    if script is None:
        return None
    env = [{"name": "HOME", "value": "/tmp"}]
    if spec.inference_engine == "ollama":
        env.append({"name": "OLLAMA_MODELS", "value": OLLAMA_MODELS_DIR})
    return {
        "name": "model-prepare",
        "image": image,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["sh", "-c", script],
        "env": env,
        "volumeMounts": cache_mounts(spec, settings),
        "securityContext": restricted_container_security(
            non_root=reader_non_root(spec, settings)),
    }


def _drain(settings: Settings) -> dict[str, Any]:
    """Let a terminating pod finish what it serves before the engine gets SIGTERM.

    Engines do not drain on SIGTERM: llama-server stops generating and holds the requests
    in flight open for about a minute, and until kube-proxy removed the pod from the
    Service, new connections were refused (a rollout on the test node failed 4 of 51
    requests). The sleep covers both; SIGKILL follows SIGTERM after GRACE_AFTER_DRAIN, so
    a request still in flight then is cut, not left hanging.
    """
    if settings.drain_seconds == 0:
        return {}
    return {"lifecycle": {"preStop": {"sleep": {"seconds": settings.drain_seconds}}}}


STARTUP_PROBE_SECONDS = 1


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,
            "failureThreshold": failures, "timeoutSeconds": timeout}


def _init_containers(spec: LLMModelSpec, eng: EngineProfile, image: str, settings: Settings
                     ) -> list[dict[str, Any]]:
    """Get the weights (download, or a modelcar), check a GGUF, fetch adapters, prepare."""
    where = origin(spec, settings)
    init = [fetch_container(model_fetch(spec, eng), settings)] if where == "download" else \
        [modelcar(spec, settings, non_root=eng.runs_as_non_root)] if where == "modelcar" else []
    if wants_gguf(spec, eng):
        init.append(verify_container(spec, settings))
    init += adapter_fetch_containers(spec, settings)
    prepare = prepare_container(spec, image, settings)
    if prepare:
        init.append(prepare)
    return init


def _server_volumes(model: LLMModel, eng: EngineProfile, settings: Settings
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The serving pod's volumes and the server's mounts of them."""
    spec = model.spec
    mounts = cache_mounts(spec, settings)
    volumes = cache_volumes(model, settings)
    compiled = compile_cache(model.namespace, eng.name, settings)
    if compiled:
        volumes.append(compiled[0])
        mounts.append(compiled[1])
    if eng.needs_shm:
        size = SHM_MULTI if spec.resources.accelerator_count > 1 else SHM_SINGLE
        mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": size}})
    claim_volumes, claim_mounts = lora.claim_volumes(spec)
    return volumes + claim_volumes, mounts + claim_mounts


def inference_deployment(
    model: LLMModel,
    *,
    vp: VendorProfile,
    eng: EngineProfile,
    image: str,
    settings: Settings,
    replicas: int | None,
    owner_uid: str | None,
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
) -> dict[str, Any]:
    spec = model.spec
    on_accel = vp.resource_key is not None
    srv = serve(spec, on_accelerator=on_accel)
    env = [{"name": k, "value": v} for k, v in (*srv.env, *(vp.env if on_accel else ()))]
    volumes, mounts = _server_volumes(model, eng, settings)
    # Probed every second while it loads: a replica woken from zero serves as soon as the
    # engine answers, not at the next 10-second tick (pod created -> Ready 10.4 -> 5.4 s for
    # Gemma 270M on the test node, bench/autoscaling). Only while starting; readiness: 10 s.
    startup_failures = max(1, settings.startup_timeout_seconds // STARTUP_PROBE_SECONDS)
    server: dict[str, Any] = {
        "name": SERVER_CONTAINER,
        "image": image,
        "imagePullPolicy": settings.images.pull_policy,
        "command": list(srv.command),
        "args": list(srv.args),
        "env": env,
        "ports": [{"name": "http", "containerPort": PORT, "protocol": "TCP"}],
        "resources": accelerators.resources(spec, vp, settings),
        "volumeMounts": mounts,
        "startupProbe": _probe(eng.health_path, STARTUP_PROBE_SECONDS, startup_failures, 5),
        **_drain(settings),
        "readinessProbe": _probe(eng.health_path, 10, 3, 5),
        "livenessProbe": _probe(eng.health_path, 30, 5, 10),
        "securityContext": restricted_container_security(
            non_root=eng.runs_as_non_root, add=vp.capabilities_add if on_accel else ()),
    }
    init = _init_containers(spec, eng, image, settings)
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": settings.drain_seconds + GRACE_AFTER_DRAIN,
        "securityContext": {"fsGroup": NON_ROOT_UID, "fsGroupChangePolicy": "OnRootMismatch",
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": init,
        "containers": [server],
        "volumes": volumes,
    }
    if claims.claimed(spec):
        pod["resourceClaims"] = claims.pod_claims(model)
    if origin(spec, settings) == "modelcar":
        pod["shareProcessNamespace"] = True  # the engine reads the modelcar's /proc/<pid>/root
    if lora.synced(spec):
        container, volume = lora.sidecar(model, settings)
        pod["containers"].append(container)
        volumes.append(volume)
    if node_selector:
        pod["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        pod["tolerations"] = tolerations
    affinity = accelerators.affinity(spec, vp, settings) if on_accel else None
    if affinity:
        pod["affinity"] = affinity
    if vp.host_ipc(spec.resources.accelerator_count):
        pod["hostIPC"] = True
    if settings.scheduling.priority_classes:
        pod["priorityClassName"] = f"{PRIORITY_CLASS_PREFIX}{spec.priority or 'normal'}"
    if settings.images.pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in settings.images.pull_secrets]
    pod_annotations = {}
    if eng.metrics_path:
        pod_annotations = {L.PROMETHEUS_SCRAPE: "true", L.PROMETHEUS_PORT: str(PORT),
                           L.PROMETHEUS_PATH: eng.metrics_path}
    extra: dict[str, str] = {L.ENGINE: spec.inference_engine, L.VENDOR: spec.accelerator_vendor}
    template_meta = pod_metadata(model, {**child_labels(model, COMPONENT), **extra},
                                 pod_annotations)
    if spec.runtime_class_name:
        pod["runtimeClassName"] = spec.runtime_class_name
    deploy_spec: dict[str, Any] = {
        "revisionHistoryLimit": 3,
        "selector": {"matchLabels": selector_labels(model)},
        "template": {"metadata": template_meta, "spec": pod},
    }
    if replicas is not None:
        deploy_spec = {"replicas": replicas, **deploy_spec}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(model, model.name, COMPONENT, owner_uid, labels=extra),
        "spec": deploy_spec,
    }

