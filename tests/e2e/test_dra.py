"""On the real node: a model's accelerators claimed through Dynamic Resource Allocation.

No GPU here, and no DRA driver: the test plays the driver's publishing part. It installs a
DeviceClass for the driver name gpu.llmop.test (the operator's settings map NVIDIA to it:
tests/e2e/install/settings.yaml) and publishes a ResourceSlice for node-1 with two devices,
an L4 (24 GiB) and an H100 (80 GiB). The installed operator renders the model's
ResourceClaimTemplate; the real controller-manager makes each pod's ResourceClaim from it and
the real scheduler allocates a device that passes its CEL selectors and binds the pod (which
then waits on the node: no driver prepares the device). A claim that no device satisfies
leaves the model WaitingForGPU in the scheduler's words.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_cluster import GEMMA_DIR, MODELS_NS, NodeCluster, kubectl_watch

pytestmark = pytest.mark.e2e
NS = MODELS_NS
DRIVER = "gpu.llmop.test"
DEVICES = {"gpu-0": ("NVIDIA L4", "24Gi"), "gpu-1": ("NVIDIA H100 80GB HBM3", "80Gi")}


def _model(name: str, card: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"modelId": name, "deploymentMode": "local", "acceleratorVendor": "nvidia",
                 "inferenceEngine": "vllm", "totalParametersBillions": 8, "quantization": "BF16",
                 "contextWindowK": 8,
                 "resources": {"allocation": "dra", "acceleratorCount": 1,
                               "preferredAcceleratorModel": card, "cpuMillicores": 100,
                               "memoryGiB": 1},
                 "scaling": {"minReplicas": 1, "maxReplicas": 1},
                 "modelSource": {"type": "file", "path": str(GEMMA_DIR)}},
    }


@pytest.fixture(scope="module")
def devices(kube_node: NodeCluster) -> Iterator[NodeCluster]:
    """The test driver's DeviceClass and node-1's ResourceSlice."""
    kube_node.namespace(NS)
    kube_node.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                            "items": [
        {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
         "metadata": {"name": DRIVER},
         "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
         "metadata": {"name": "node-1-llmop-test"},
         "spec": {"driver": DRIVER, "nodeName": "node-1",
                  "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                  "devices": [{"name": name,
                               "attributes": {"productName": {"string": product}},
                               "capacity": {"memory": {"value": memory}}}
                              for name, (product, memory) in DEVICES.items()]}}]}))
    try:
        with kube_node.own_models():
            yield kube_node
    finally:
        kube_node.kubectl("delete", "resourceslice", "node-1-llmop-test", "--ignore-not-found")
        kube_node.kubectl("delete", "deviceclass", DRIVER, "--ignore-not-found")


def _claims(node: NodeCluster, model: str) -> list[dict[str, Any]]:
    pods = node.json("-n", NS, "get", "pods", "-l", f"app={model}")["items"]
    names = {s["resourceClaimName"] for p in pods
             for s in (p.get("status") or {}).get("resourceClaimStatuses") or []}
    return [node.json("-n", NS, "get", "resourceclaim", n) for n in sorted(names)]


def test_the_scheduler_allocates_the_device_the_claim_asks_for_and_binds_the_pod(
        devices: NodeCluster) -> None:
    devices.kubectl("apply", "-f", "-", stdin=json.dumps(_model("h100-claimed", "NVIDIA H100")))
    # a label selector that matches nothing yet fails at once: first the pod must exist
    # (the operator's Deployment, then its ReplicaSet's pod)
    devices.kubectl("-n", NS, "wait", "--for=create", "deployment/h100-claimed",
                    "--timeout=90s")
    devices.kubectl("-n", NS, "wait", "--for=jsonpath={.status.replicas}=1",
                    "deployment/h100-claimed", "--timeout=90s")
    devices.kubectl("-n", NS, "wait", "pods", "-l", "app=h100-claimed",
                    "--for=jsonpath={.spec.nodeName}=node-1", "--timeout=90s")
    template = devices.json("-n", NS, "get", "resourceclaimtemplate",
                            "h100-claimed-accelerators")
    exactly = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert (exactly["deviceClassName"], exactly["count"]) == (DRIVER, 1)
    (claim,) = _claims(devices, "h100-claimed")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    # the H100: the L4 has neither the memory (8B at BF16 needs ~20 GiB) nor the name
    assert (result["driver"], result["pool"], result["device"]) == (DRIVER, "node-1", "gpu-1")
    # the operator writes the phase a moment after the pod is placed: watched, not sampled
    with kubectl_watch(devices.plane, "-n", NS, "get", "llmmodel/h100-claimed", "--watch",
                       "-o", "jsonpath={.status.phase}{'\\n'}") as phases:
        phases.until(lambda seen: bool({"Starting", "Degraded"} & set(seen)), 90)


def test_a_claim_no_device_satisfies_waits_for_gpus_with_the_schedulers_reason(
        devices: NodeCluster) -> None:
    devices.kubectl("apply", "-f", "-", stdin=json.dumps(_model("b200-claimed", "NVIDIA B200")))
    devices.wait_phase(NS, "b200-claimed", "WaitingForGPU", 90)
    model = devices.json("-n", NS, "get", "llmmodel", "b200-claimed")
    placed = next(c for c in model["status"]["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "InsufficientCapacity"
    assert placed["message"].startswith(
        "waiting for accelerators: no devices satisfy the model's claim now: 0/1 nodes are "
        "available:"), placed
    assert "cannot allocate all claims" in placed["message"]
