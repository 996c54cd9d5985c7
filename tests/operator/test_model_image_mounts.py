"""A model image mounts as the cluster's nodes allow: what the operator reads from them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_operator.kube import Kube
from llm_operator.operator.reconciler import reconcile
from llm_operator.profiles.settings import ModelImages, Settings

from cluster import Cluster
from operators import connect
from samples import REPO, load_yaml

EXAMPLE = REPO / "examples" / "cluster" / "gemma-270m-image.yaml"
NAME = "gemma-270m-image"


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    async def no_sleep(_: float) -> None:
        return None

    cluster.register("v1", "nodes", "Node", namespaced=False)
    async with Kube(connect(cluster), sleep=no_sleep) as k:
        yield k


async def add_node(kube: Kube, name: str, runtime: str) -> None:
    await kube.request("POST", "/api/v1/nodes", body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"nodeInfo": {"containerRuntimeVersion": runtime,
                                "kubeletVersion": "v1.36.0"}}})


async def add_model(kube: Kube) -> dict[str, Any]:
    created: dict[str, Any] = await kube.request(
        "POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
        body=load_yaml(EXAMPLE))
    return created


def pod_spec(cluster: Cluster) -> dict[str, Any]:
    deployment = cluster.get("apps/v1", "deployments", "ai-models", NAME)
    assert deployment is not None
    spec: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize(("runtimes", "mounted"), [
    (["containerd://2.3.4", "cri-o://1.33.0"], "image-volume"),
    (["containerd://2.3.4", "containerd://1.7.27"], "modelcar"),
])
async def test_auto_takes_the_image_volume_only_where_every_node_can(
        cluster: Cluster, kube: Kube, runtimes: list[str], mounted: str) -> None:
    for i, runtime in enumerate(runtimes):
        await add_node(kube, f"node-{i}", runtime)
    outcome = await reconcile(kube, await add_model(kube), Settings())
    assert outcome.phase == "Pending"
    pod = pod_spec(cluster)
    has_volume = any("image" in v for v in pod["volumes"])
    assert (has_volume, pod.get("shareProcessNamespace", False)) == (
        (True, False) if mounted == "image-volume" else (False, True))


async def test_image_volumes_asked_for_where_no_node_can_mount_them_fail_with_the_nodes(
        cluster: Cluster, kube: Kube) -> None:
    await add_node(kube, "node-1", "containerd://1.7.27")
    settings = Settings(model_images=ModelImages(mount="image-volume"))
    outcome = await reconcile(kube, await add_model(kube), settings)
    assert outcome.phase == "Failed"
    assert cluster.get("apps/v1", "deployments", "ai-models", NAME) is None
    model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", NAME)
    assert model is not None
    placed = next(c for c in model["status"]["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "ImageVolumeUnsupported"
    assert placed["message"] == (
        "operator setting modelImages.mount: image-volume, and no node that may run this "
        "model can mount an image volume (Kubernetes 1.35+ with containerd 2.1+ or CRI-O "
        "1.33+): node-1 runs containerd://1.7.27; set modelImages.mount to auto, modelcar "
        "or pull")
    # the nodes are upgraded: the next reconcile serves it
    await kube.merge_patch("v1", "nodes", None, "node-1", body={"status": {"nodeInfo": {
        "containerRuntimeVersion": "containerd://2.3.4"}}})
    model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", NAME)
    assert (await reconcile(kube, model, settings)).phase == "Pending"  # type: ignore[arg-type]
    assert any("image" in v for v in pod_spec(cluster)["volumes"])
