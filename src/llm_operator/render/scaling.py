"""KEDA autoscaling: the ScaledObject (queue depth) and the HTTP add-on for scale-from-zero."""

from __future__ import annotations

from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import PORT, EngineProfile
from llm_operator.profiles.settings import Settings
from llm_operator.render.meta import http_scaled_object_name, metadata
from llm_operator.render.networking import service_host

COMPONENT = "inference"
CPU_UTILIZATION_TARGET = "80"
DEPLOYMENT = ("apps/v1", "Deployment")


def autoscaled(model: LLMModel) -> bool:
    """KEDA owns replicas unless the bounds leave nothing to decide (min == max).

    A disaggregated model's roles keep their own replica counts: nothing autoscales them;
    nor a pool's member, whose pool's engine scales as one (api/pools.py: pool_scaling).
    """
    spec, scaling = model.spec, model.spec.scaling
    roles = spec.serving.disaggregation if spec.serving else None
    return not spec.is_remote and roles is None and spec.pool is None \
        and scaling.min_replicas != scaling.max_replicas


def keda_scales(model: LLMModel, settings: Settings) -> bool:
    """Whether KEDA objects are rendered: autoscaler keda or auto, not builtin.

    Under auto, a cluster without KEDA skips them and the built-in autoscaler sets the
    replicas meanwhile.
    """
    return autoscaled(model) and settings.autoscaler != "builtin"


def wants_http_addon(model: LLMModel, settings: Settings) -> bool:
    """Scale from zero through the HTTP add-on: only when no router wakes the model."""
    return keda_scales(model, settings) and model.spec.scaling.min_replicas == 0 \
        and settings.keda.http_addon.enabled and not settings.router.enabled


def router_query(model: LLMModel) -> str:
    """The router's held and in-flight requests for this model, summed over its replicas."""
    return (f'sum(llmop_router_pending_requests{{namespace="{model.namespace}",'
            f'model="{model.name}"}})')


def pod_selector(model: LLMModel) -> str:
    """PromQL label matchers for this model's serving pods (and no other model's).

    A Deployment's pods (<name>-<hash>-<suffix>) or a LeaderWorkerSet's leaders
    (<name>-<group>); its workers serve no metrics.
    """
    return (f'namespace="{model.namespace}",'
            f'pod=~"{model.name}-([a-z0-9]+-[a-z0-9]+|[0-9]+)"')


def queue_query(model: LLMModel, metric: str) -> str:
    """The guide's query, with the pod regex anchored to this Deployment's pod names."""
    return f"sum({metric}{{{pod_selector(model)}}})"


def scaled_object(
    model: LLMModel, eng: EngineProfile, settings: Settings, owner_uid: str | None,
    target: tuple[str, str] = DEPLOYMENT,
) -> dict[str, Any]:
    """KEDA's scaler of the model's workload (``target``: its apiVersion and kind)."""
    scaling = model.spec.scaling
    triggers: list[dict[str, Any]] = []
    if eng.queue_metric:
        triggers.append({"type": "prometheus", "metadata": {
            "serverAddress": settings.prometheus_address,
            "query": queue_query(model, eng.queue_metric),
            "threshold": str(scaling.scale_up_threshold),
            "activationThreshold": settings.keda.activation_threshold,
        }})
    else:  # no queue metric (Ollama): scale on CPU, the engine's real bottleneck here
        triggers.append({"type": "cpu", "metricType": "Utilization",
                         "metadata": {"value": CPU_UTILIZATION_TARGET}})
    if settings.router.enabled:  # the first held request activates a model at zero
        triggers.append({"type": "prometheus", "metadata": {
            "serverAddress": settings.prometheus_address,
            "query": router_query(model),
            "threshold": str(scaling.scale_up_threshold),
            "activationThreshold": "0",
        }})
    if wants_http_addon(model, settings):
        triggers.append({"type": "external-push", "metadata": {
            "scalerAddress": settings.keda.http_addon.external_scaler_address,
            "httpScaledObject": http_scaled_object_name(model),
        }})
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(model, model.name, COMPONENT, owner_uid),
        "spec": {
            "scaleTargetRef": {"apiVersion": target[0], "kind": target[1], "name": model.name},
            "minReplicaCount": scaling.min_replicas,
            "maxReplicaCount": scaling.max_replicas,
            "cooldownPeriod": scaling.cooldown_period_seconds,
            "pollingInterval": settings.keda.polling_interval_seconds,
            "triggers": triggers,
        },
    }


def http_scaled_object(
    model: LLMModel, settings: Settings, owner_uid: str | None,
    target: tuple[str, str] = DEPLOYMENT,
) -> dict[str, Any]:
    """Request buffering while a scaled-to-zero model starts.

    Its trigger lives in our ScaledObject (KEDA allows one per workload), so the add-on is
    told not to create its own.
    """
    scaling = model.spec.scaling
    return {
        "apiVersion": "http.keda.sh/v1alpha1",
        "kind": "HTTPScaledObject",
        "metadata": metadata(model, http_scaled_object_name(model), COMPONENT, owner_uid,
                             annotations={L.HTTP_ADDON_SKIP_SCALEDOBJECT: "true"}),
        "spec": {
            "hosts": [service_host(model, settings)],
            "scaleTargetRef": {"apiVersion": target[0], "kind": target[1],
                               "name": model.name, "service": model.name, "port": PORT},
            "replicas": {"min": scaling.min_replicas, "max": scaling.max_replicas},
            "scaledownPeriod": scaling.cooldown_period_seconds,
            "scalingMetric": {"concurrency": {
                "targetValue": settings.keda.http_addon.target_pending_requests}},
            "timeouts": {"conditionWait": f"{settings.startup_timeout_seconds}s"},
        },
    }
