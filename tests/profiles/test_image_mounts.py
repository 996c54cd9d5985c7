"""How a model image mounts: which nodes can take image volumes, and what auto chooses."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.profiles.image_mounts import choose, image_volume_gap


def node(name: str, runtime: str, kubelet: str = "v1.36.0", *, labels: dict[str, str] | None
         = None, unschedulable: bool = False) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "spec": {"unschedulable": True} if unschedulable else {},
            "status": {"nodeInfo": {"containerRuntimeVersion": runtime,
                                    "kubeletVersion": kubelet}}}


@pytest.mark.parametrize(("runtime", "kubelet", "gap"), [
    ("containerd://2.3.4", "v1.36.0", None),
    ("containerd://2.1.0", "v1.35.2", None),
    ("cri-o://1.33.1", "v1.35.0", None),
    ("cri-o://1.31.3", "v1.35.0", "runs cri-o://1.31.3"),  # image volumes, but no subPath
    ("containerd://2.0.5", "v1.36.0", "runs containerd://2.0.5"),
    ("containerd://1.7.27", "v1.36.0", "runs containerd://1.7.27"),
    ("docker://28.1.1", "v1.36.0", "runs docker://28.1.1"),
    ("", "v1.36.0", "runs an unknown runtime"),
    ("containerd://2.3.4", "v1.34.1", "runs kubelet v1.34.1"),  # ImageVolume off by default
    ("containerd://2.3.4-k3s1", "v1.35.1+k3s1", None),
])
def test_image_volumes_need_a_recent_kubelet_and_runtime(runtime: str, kubelet: str,
                                                         gap: str | None) -> None:
    assert image_volume_gap(node("n", runtime, kubelet)) == gap


NEW, OLD = "containerd://2.3.4", "containerd://1.7.27"
GPU = {"nvidia.com/gpu.present": "true"}


@pytest.mark.parametrize(("setting", "nodes", "selector", "mode", "problem"), [
    # llmop render sees no nodes: auto is the image volume, as the book advises
    ("auto", None, {}, "image-volume", None),
    ("auto", [node("a", NEW), node("b", NEW)], {}, "image-volume", None),
    # one node that could not mount it is enough: the scheduler does not know the difference
    ("auto", [node("a", NEW), node("b", OLD)], {}, "modelcar", None),
    # ...unless the pods may not land there: the node selector, a cordoned node
    ("auto", [node("a", NEW, labels=GPU), node("b", OLD)], GPU, "image-volume", None),
    ("auto", [node("a", NEW), node("b", OLD, unschedulable=True)], {}, "image-volume", None),
    ("auto", [], {}, "modelcar", None),
    ("modelcar", [node("a", NEW)], {}, "modelcar", None),
    ("pull", [node("a", NEW)], {}, "pull", None),
    ("image-volume", None, {}, "image-volume", None),
    ("image-volume", [node("a", NEW), node("b", OLD)], {}, "image-volume", None),
    ("image-volume", [node("a", OLD), node("b", NEW, kubelet="v1.33.0")], {}, "image-volume",
     "a runs containerd://1.7.27; b runs kubelet v1.33.0"),
    ("image-volume", [node("a", NEW)], GPU, "image-volume",
     "no schedulable node matches the model's node selector"),
])
def test_the_setting_is_made_concrete_for_the_nodes_that_may_run_the_model(
        setting: str, nodes: list[dict[str, Any]] | None, selector: dict[str, str], mode: str,
        problem: str | None) -> None:
    choice = choose(setting, nodes, selector)
    assert choice.mode == mode
    if problem is None:
        assert choice.problem is None
    else:
        assert choice.problem is not None
        assert choice.problem.startswith("operator setting modelImages.mount: image-volume")
        assert problem in choice.problem
        assert "set modelImages.mount to auto, modelcar or pull" in choice.problem
