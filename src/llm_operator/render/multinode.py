"""One replica over several nodes: the LeaderWorkerSet that replaces the Deployment.

The inference Deployment is rendered as usual and its pod template split in two: the
leader keeps the serving container and its probes (it answers HTTP), the workers run the
engine's worker command without ports or probes. Every pod of a group downloads the
weights into its own volume (a claim template: one node cannot read another's disk).
Shapes follow leaderworkerset.x-k8s.io/v1 (the CRD in the tests' schemas).
"""

from __future__ import annotations

import copy
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles import multinode
from llm_operator.profiles.engines import serve
from llm_operator.profiles.settings import Storage
from llm_operator.profiles.vendors import vendor
from llm_operator.render.weights import CACHE_VOLUME
from llm_operator.render.workload import SERVER_CONTAINER, model_cache_claim

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
WORKER_CONTAINER = "inference-worker"
LEADERS = {L.LWS_WORKER_INDEX: "0"}  # selects the pods that answer HTTP
REF = (API_VERSION, KIND)


def _split(template: dict[str, Any], model: LLMModel, nodes: int
           ) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = model.spec
    srv = serve(spec, on_accelerator=vendor(spec.accelerator_vendor).resource_key is not None)
    leader, worker = copy.deepcopy(template), copy.deepcopy(template)
    for pod in (leader, worker):
        volumes = [v for v in pod["spec"]["volumes"] if v["name"] != CACHE_VOLUME
                   or "persistentVolumeClaim" not in v]
        pod["spec"]["volumes"] = volumes
    (lead,) = [c for c in leader["spec"]["containers"] if c["name"] == SERVER_CONTAINER]
    lead["command"], lead["args"] = multinode.leader(spec, srv, nodes)
    (work,) = [c for c in worker["spec"]["containers"] if c["name"] == SERVER_CONTAINER]
    command, args = multinode.worker(spec, srv, nodes)
    work.update(name=WORKER_CONTAINER, command=command, args=args)
    if not args:
        del work["args"]
    for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe", "lifecycle"):
        work.pop(key, None)
    worker["metadata"]["labels"][L.K8S_COMPONENT] = "inference-worker"
    scrape = (L.PROMETHEUS_SCRAPE, L.PROMETHEUS_PORT, L.PROMETHEUS_PATH)
    kept = {k: v for k, v in (worker["metadata"].get("annotations") or {}).items()
            if k not in scrape}  # the leader serves the metrics; podAnnotations stay
    worker["metadata"].pop("annotations", None)
    if kept:
        worker["metadata"]["annotations"] = kept
    return leader, worker


def leader_worker_set(model: LLMModel, deployment: dict[str, Any], nodes: int,
                      cache_gib: int, storage: Storage) -> dict[str, Any]:
    """The LeaderWorkerSet serving ``model`` with groups of ``nodes`` pods.

    ``deployment`` is the single-node Deployment it replaces (its metadata, replicas and
    pod template are reused); ``storage``: the settings of the cache's volumes.
    """
    template = deployment["spec"]["template"]
    leader, worker = _split(template, model, nodes)
    group: dict[str, Any] = {
        "size": nodes,
        # A pod that restarts leaves its group's distributed state behind: restart them all.
        "restartPolicy": "RecreateGroupOnPodRestart",
        "leaderTemplate": leader,
        "workerTemplate": worker,
    }
    claimed = any(v["name"] == CACHE_VOLUME and "persistentVolumeClaim" in v
                  for v in template["spec"]["volumes"])
    if claimed:
        group["volumeClaimTemplates"] = [model_cache_claim(cache_gib, storage)]
        # Deleted with the model; kept on scale-down, so a group that comes back does not
        # download the weights again.
        group["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Delete",
                                                         "whenScaled": "Retain"}
    # A headless Service per group, named after its leader pod, gives the pods their DNS
    # names (LWS_LEADER_ADDRESS). The default (Shared) names one after the LeaderWorkerSet,
    # which is the model's own Service name: not headless, so no pod would have a name.
    spec: dict[str, Any] = {"startupPolicy": "LeaderCreated",
                            "networkConfig": {"subdomainPolicy": "UniquePerReplica"},
                            "leaderWorkerTemplate": group}
    if "replicas" in deployment["spec"]:
        spec = {"replicas": deployment["spec"]["replicas"], **spec}
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": copy.deepcopy(deployment["metadata"]), "spec": spec}
