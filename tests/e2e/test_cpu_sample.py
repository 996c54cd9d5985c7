"""On the real node: the guide's CPU sample is placed, rendered, applied and observed, then goes.

The 9B weights never download here (no network, no storage provisioner): the installed
operator creates its children, the real scheduler cannot place its pod (the cache PVC never
binds), status says so, and every child is garbage-collected after the model is deleted.
"""

from __future__ import annotations

import json

import pytest
from e2e_cluster import NodeCluster

from samples import sample_doc

pytestmark = pytest.mark.e2e
NS = "ai-models"


def test_the_cpu_sample_waits_for_storage_and_its_children_go_with_it(
        kube_node: NodeCluster) -> None:
    doc = sample_doc("qwen35-9b-cpu")
    name = doc["metadata"]["name"]
    kube_node.namespace(NS)
    kube_node.kubectl("-n", NS, "create", "secret", "generic", "hf-token",
                      "--from-literal=token=not-a-real-token")
    kube_node.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    # no storage provisioner here, as on a cluster without a default StorageClass: the real
    # scheduler cannot place the pod, and status says why in the scheduler's words
    kube_node.kubectl("-n", NS, "wait", f"llmmodel/{name}", "--for=condition=Placed=False",
                      "--timeout=60s")
    selector = f"app.kubernetes.io/instance={name}"
    children = kube_node.kubectl("-n", NS, "get", "deployments,services,pvc", "-l", selector,
                                 "-o", "name").split()
    assert sorted(children) == sorted([f"deployment.apps/{name}", f"service/{name}",
                                       f"persistentvolumeclaim/{name}-model-cache"])
    model = json.loads(kube_node.kubectl("-n", NS, "get", "llmmodel", name, "-o", "json"))
    assert model["metadata"]["labels"]["ai.example.io/accelerator-vendor"] == "cpu"
    assert model["status"]["phase"] == "Pending"
    placed = next(c for c in model["status"]["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "Unschedulable"
    assert "unbound immediate PersistentVolumeClaims" in placed["message"]
    kube_node.kubectl("-n", NS, "delete", "llmmodel", name, "--timeout=60s")
    kube_node.kubectl("-n", NS, "wait", "--for=delete", "deployment", name, "--timeout=60s",
                      check=False)
    assert kube_node.kubectl("-n", NS, "get", "deployments,services,pvc", "-l", selector,
                             "-o", "name").strip() == ""
    kube_node.kubectl("-n", NS, "delete", "secret", "hf-token")
