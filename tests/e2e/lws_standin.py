"""What the LeaderWorkerSet controller does for one group, done by the test on the real node.

No LeaderWorkerSet controller can run on the test node (its image is on a registry this
machine cannot reach), so for a LeaderWorkerSet the operator applied, the test creates what
lws.sigs.k8s.io's controller creates for group 0 with ``subdomainPolicy: UniquePerReplica``:
a headless Service named after the group's leader that publishes not-ready addresses (the
workers must find the leader before it is Ready: it serves only once they joined), the
leader pod and its workers from the two templates, with the hostname, subdomain, labels and
the ``LWS_*`` environment its pod webhook sets, owned by the LeaderWorkerSet (deleting the
model deletes them); then, once every pod of the group is Ready, the status the controller
would write (``readyReplicas``), which is what the operator reads.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from e2e_cluster import NodeCluster

PREFIX = "leaderworkerset.sigs.k8s.io"


def _owner(lws: dict[str, Any]) -> list[dict[str, Any]]:
    meta = lws["metadata"]
    return [{"apiVersion": lws["apiVersion"], "kind": lws["kind"], "name": meta["name"],
             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]


def _pod(lws: dict[str, Any], template: dict[str, Any], worker: int) -> dict[str, Any]:
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    leader = f"{name}-0"
    pod = copy.deepcopy(template)
    meta = pod.setdefault("metadata", {})
    meta.update(name=leader if worker == 0 else f"{leader}-{worker}", namespace=namespace,
                ownerReferences=_owner(lws))
    meta.setdefault("labels", {}).update({
        f"{PREFIX}/name": name, f"{PREFIX}/group-index": "0",
        f"{PREFIX}/worker-index": str(worker)})
    meta.setdefault("annotations", {})[f"{PREFIX}/size"] = str(size)
    spec = pod["spec"]
    spec.update(hostname=meta["name"], subdomain=leader)
    env = [{"name": "LWS_LEADER_ADDRESS", "value": f"{leader}.{leader}.{namespace}"},
           {"name": "LWS_GROUP_SIZE", "value": str(size)},
           {"name": "LWS_WORKER_INDEX", "value": str(worker)}]
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        container["env"] = [*env, *container.get("env", [])]
    return {"apiVersion": "v1", "kind": "Pod", **pod}


def create_group(cluster: NodeCluster, namespace: str, name: str) -> list[str]:
    """The group's Service and pods for the LeaderWorkerSet ``name`` (waited for): the pods'
    names, leader first."""
    cluster.kubectl("-n", namespace, "wait", f"leaderworkerset/{name}", "--for=create",
                    "--timeout=60s")
    lws = cluster.json("-n", namespace, "get", "leaderworkerset", name)
    lws.setdefault("apiVersion", "leaderworkerset.x-k8s.io/v1")
    lws.setdefault("kind", "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    leader = f"{name}-0"
    service = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": leader, "namespace": namespace, "ownerReferences": _owner(lws)},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {f"{PREFIX}/name": name, f"{PREFIX}/group-index": "0"}}}
    pods = [_pod(lws, group["leaderTemplate"], 0),
            *(_pod(lws, group["workerTemplate"], i) for i in range(1, group["size"]))]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [service, *pods]}))
    return [p["metadata"]["name"] for p in pods]


def mark_ready(cluster: NodeCluster, namespace: str, name: str, pods: list[str],
               timeout: int) -> None:
    """Once every pod of the group is Ready, the LeaderWorkerSet's status says so."""
    waited = cluster.plane.kubectl("-n", namespace, "wait", "--for=condition=Ready",
                                   f"--timeout={timeout}s", *(f"pod/{p}" for p in pods),
                                   timeout=timeout + 30, check=False)
    if waited.returncode != 0:
        raise AssertionError(f"the group's pods not Ready in {timeout} s: {waited.stderr}\n"
                             f"{cluster.explain(namespace, f'{PREFIX}/name={name}')}")
    cluster.kubectl("-n", namespace, "patch", "leaderworkerset", name, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": {
                        "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1}}))
