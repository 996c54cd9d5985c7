"""Where an inference pod's weights come from: its cache, a node file, or a model image."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any, Literal

from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.api.validation import Problem
from llm_operator.profiles.engines import CACHE_DIR, SOURCE_DIR, EngineProfile, engine
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import pvc_name, restricted_container_security

CACHE_VOLUME = "model-cache"
MODEL_IMAGE = "model-image"  # the image volume's name, and the modelcar sidecar's
IMAGE_MODELS_DIR = "models"  # where a model image holds the weights (KServe's modelcars too)

Origin = Literal["download", "node-file", "image-volume", "modelcar"]


def wants_gguf(spec: LLMModelSpec, eng: EngineProfile) -> bool:
    return eng.gguf_only or spec.quantization.startswith("GGUF-")


def node_file(spec: LLMModelSpec) -> str | None:
    """The model already on the node (modelSource type file, absolute path), if any.

    Such a model downloads nothing: the GGUF file, or for vLLM and SGLang the Hugging Face
    model directory, is mounted read-only from the node (hostPath) where the download would
    have put it (a GGUF file is checked by model-verify first); the cache is an emptyDir that
    holds only which file was checked and vLLM's compile cache.
    """
    source = spec.model_source
    if source is None or source.type != "file" or source.path is None:
        return None
    return source.path if source.path.startswith("/") else None


def node_file_problems(spec: LLMModelSpec) -> list[Problem]:
    """Why a file source cannot run in a cluster (a relative path, a PyPI package)."""
    source = spec.model_source
    if source is None or source.type != "file" or node_file(spec):
        return []
    if source.python_package is not None:
        return [Problem("spec.modelSource.pythonPackage",
                        "a model installed by pip lives on one machine, which a cluster "
                        "cannot reach: serve it with `llmop up`, or copy the GGUF file to the "
                        "nodes and give its absolute path in modelSource.path")]
    return [Problem("spec.modelSource.path",
                    f"{source.path!r} is relative: in a cluster give the GGUF file's absolute "
                    "path on the node (every node that may run the model needs the file)")]


def _node_directory(spec: LLMModelSpec) -> bool:
    """A node path that is a Hugging Face model directory (vLLM, SGLang), not one GGUF file."""
    return not wants_gguf(spec, engine(spec.inference_engine))


def origin(spec: LLMModelSpec, settings: Settings) -> Origin:
    """Where the weights come from, for the pods to get them there.

    Downloaded into the cache (Hugging Face, S3, an OCI artifact pulled by oras), a node
    file, or a model image mounted as a volume or shared by a modelcar sidecar
    (modelImages.mount, made concrete by the operator; `auto` here, where no nodes are
    known: the image volume).
    """
    if node_file(spec):
        return "node-file"
    source = spec.model_source
    if source is None or source.type != "oci":
        return "download"
    mount = settings.model_images.mount
    return "download" if mount == "pull" else "modelcar" if mount == "modelcar" \
        else "image-volume"


def downloads(spec: LLMModelSpec, settings: Settings) -> bool:
    """The pod downloads its weights into the cache (a claim sized for them)."""
    return origin(spec, settings) == "download"


def cache_mounts(spec: LLMModelSpec, settings: Settings) -> list[dict[str, Any]]:
    """The model cache, and the weights where the download would have put them."""
    mounts: list[dict[str, Any]] = [{"name": CACHE_VOLUME, "mountPath": CACHE_DIR}]
    where = origin(spec, settings)
    path = node_file(spec)
    if path:
        at = SOURCE_DIR if _node_directory(spec) else f"{SOURCE_DIR}/{PurePosixPath(path).name}"
        mounts.append({"name": "model-file", "readOnly": True, "mountPath": at})
    elif where == "image-volume":
        mounts.append({"name": MODEL_IMAGE, "readOnly": True, "mountPath": SOURCE_DIR,
                       "subPath": IMAGE_MODELS_DIR})
    return mounts  # a modelcar links SOURCE_DIR to its own files in the cache


def cache_volumes(model: LLMModel, settings: Settings) -> list[dict[str, Any]]:
    """The cache (a claim when the pod downloads, else an emptyDir) and the weights' volume."""
    spec = model.spec
    where = origin(spec, settings)
    if where == "download":
        return [{"name": CACHE_VOLUME,
                 "persistentVolumeClaim": {"claimName": pvc_name(model)}}]
    volumes: list[dict[str, Any]] = [{"name": CACHE_VOLUME, "emptyDir": {}}]
    path = node_file(spec)
    if path:
        kind = "Directory" if _node_directory(spec) else "File"
        volumes.append({"name": "model-file", "hostPath": {"path": path, "type": kind}})
    elif where == "image-volume":
        volumes.append(image_volume(spec, settings))
    return volumes


def image_volume(spec: LLMModelSpec, settings: Settings) -> dict[str, Any]:
    """The model image as a volume (pulled by the kubelet as it pulls container images)."""
    assert spec.model_source is not None and spec.model_source.oci_image is not None
    return {"name": MODEL_IMAGE, "image": {"reference": spec.model_source.oci_image,
                                           "pullPolicy": settings.images.pull_policy}}


def reader_non_root(spec: LLMModelSpec, settings: Settings) -> bool:
    """Whether the init containers that read the weights run as the non-root user.

    They do, but beside a modelcar of an engine that runs as its image's user (vLLM,
    SGLang): /proc/<pid>/root is readable by the modelcar's own user only.
    """
    return origin(spec, settings) != "modelcar" or engine(spec.inference_engine).runs_as_non_root


# The shell's pid is $$, written $$$$: Kubernetes turns $$ in a command into $ (its escape
# for $(VAR) references), so a plain $$ reached the shell as a literal "$" (found on the node).
MODELCAR_SCRIPT = (f"ln -sfn /proc/$$$$/root/{IMAGE_MODELS_DIR} {SOURCE_DIR} "
                   "&& exec sleep infinity")


def modelcar(spec: LLMModelSpec, settings: Settings, *, non_root: bool) -> dict[str, Any]:
    """The model image as a native sidecar (an init container that keeps running).

    It links SOURCE_DIR in the cache to its own /models through the pod's shared process
    namespace (/proc/<its pid>/root), then sleeps; its startup probe holds the next init
    containers and the engine until the link resolves. It runs as the engine does: reading
    another process's root needs the same user.
    """
    assert spec.model_source is not None and spec.model_source.oci_image is not None
    return {
        "name": MODEL_IMAGE,
        "image": spec.model_source.oci_image,
        "imagePullPolicy": settings.images.pull_policy,
        "restartPolicy": "Always",
        "command": ["sh", "-c", MODELCAR_SCRIPT],
        "startupProbe": {"exec": {"command": ["test", "-d", f"{SOURCE_DIR}/"]},
                         "periodSeconds": 1, "failureThreshold": 120},
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"memory": "64Mi"}},
        "volumeMounts": [{"name": CACHE_VOLUME, "mountPath": CACHE_DIR}],
        "securityContext": restricted_container_security(non_root=non_root),
    }
