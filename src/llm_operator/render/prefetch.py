"""Images pulled ahead: a DaemonSet per model holding its engine and model images on its nodes."""

from __future__ import annotations

from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.settings import Settings
from llm_operator.render import weights
from llm_operator.render.meta import metadata, restricted_container_security

COMPONENT = "prefetch"
PULLED = ["sh", "-c", "exit 0"]  # the image is on the node once this ran


def _small() -> dict[str, Any]:
    return {"requests": {"cpu": "1m", "memory": "8Mi"}, "limits": {"memory": "32Mi"}}


def name(model: LLMModel) -> str:
    return f"{model.name}-{COMPONENT}"


def pod_labels(model: LLMModel) -> dict[str, str]:
    """The prefetch pods' labels, never those of the model's replicas.

    Not the model-name (nor app) label its Service, monitors, pools and budgets select:
    prefetch-for names the model instead (the operator watches those pods apart).
    """
    return {L.PREFETCH_FOR: model.name, L.K8S_COMPONENT: COMPONENT,
            L.K8S_INSTANCE: model.name, L.K8S_MANAGED_BY: L.MANAGED_BY_VALUE}


def daemon_set(model: LLMModel, *, engine_image: str, settings: Settings,
               node_selector: dict[str, str], tolerations: list[dict[str, Any]],
               affinity: dict[str, Any] | None, owner_uid: str | None) -> dict[str, Any]:
    """One pod per node the model may run on, whose containers are the model's images.

    The engine image, and the model image the way the model's pods get it (a volume, a
    modelcar; a downloaded model has none to pull), each run as an init container that exits
    at once: once the pod runs, the node has them, and the kubelet's image garbage collector
    leaves images of running pods alone. It asks for almost nothing, and runs last among
    equals (the lowest priority class).
    """
    spec = model.spec
    pull = settings.images.pull_policy

    def pulled(container: str, image: str) -> dict[str, Any]:
        return {"name": container, "image": image, "imagePullPolicy": pull, "command": list(PULLED),
                "resources": _small(),
                "securityContext": restricted_container_security(non_root=False)}

    init = [pulled("engine", engine_image)]
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    where = weights.origin(spec, settings)
    source = spec.model_source
    if where == "modelcar" and source is not None and source.oci_image:
        init.append(pulled(weights.MODEL_IMAGE, source.oci_image))
    elif where == "image-volume":
        volumes.append(weights.image_volume(spec, settings))
        mounts.append({"name": weights.MODEL_IMAGE, "mountPath": "/model-image",
                       "readOnly": True})
    hold: dict[str, Any] = {"name": "hold", "image": settings.images.pause,
                            "imagePullPolicy": pull, "resources": _small(),
                            "securityContext": restricted_container_security(non_root=True)}
    if mounts:
        hold["volumeMounts"] = mounts
    pod: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": init,
        "containers": [hold],
    }
    if volumes:
        pod["volumes"] = volumes
    if node_selector:
        pod["nodeSelector"] = dict(sorted(node_selector.items()))
    if tolerations:
        pod["tolerations"] = tolerations
    if affinity:
        pod["affinity"] = affinity
    if settings.scheduling.priority_classes:
        pod["priorityClassName"] = "llmop-batch"
    if settings.images.pull_secrets:
        pod["imagePullSecrets"] = [{"name": n} for n in settings.images.pull_secrets]
    labels = pod_labels(model)
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(model, name(model), COMPONENT, owner_uid),
        "spec": {
            "selector": {"matchLabels": {L.PREFETCH_FOR: model.name}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
