"""scaling.prefetchImages: a DaemonSet holding the model's images on the nodes it may run on."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from samples import REPO, load_yaml, sample_doc

IMAGE_EXAMPLE = REPO / "examples" / "cluster" / "gemma-270m-image.yaml"
MODEL_IMAGE = "llmop.local/models/gemma-3-270m:q4_k_m"


def _objects(doc: dict[str, Any], mount: str = "auto") -> dict[str, dict[str, Any]]:
    settings = Settings.model_validate({"modelImages": {"mount": mount}})
    return {o["kind"]: o for o in render(parse_llmmodel(doc), settings)}


def _prefetching(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    out["spec"].setdefault("scaling", {})["prefetchImages"] = True
    return out


@pytest.mark.parametrize(("mount", "init", "volume"), [
    ("image-volume", ["engine"], True),  # the kubelet pulls the model image for the volume
    ("modelcar", ["engine", "model-image"], False),
    ("pull", ["engine"], False),  # downloaded into the cache: only the engine to pull
])
def test_the_daemonset_pulls_the_images_the_way_the_pods_use_them(
        mount: str, init: list[str], volume: bool) -> None:
    objects = _objects(load_yaml(IMAGE_EXAMPLE), mount)
    pod = objects["DaemonSet"]["spec"]["template"]["spec"]
    engine = objects["Deployment"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert [c["name"] for c in pod["initContainers"]] == init
    assert pod["initContainers"][0]["image"] == engine
    assert all(c["command"] == ["sh", "-c", "exit 0"] for c in pod["initContainers"])
    if mount == "modelcar":
        assert pod["initContainers"][1]["image"] == MODEL_IMAGE
    assert ({"name": "model-image", "image": {"reference": MODEL_IMAGE,
                                              "pullPolicy": "IfNotPresent"}}
            in pod.get("volumes", [])) == volume
    assert [c["image"] for c in pod["containers"]] == ["registry.k8s.io/pause:3.10"]
    assert pod["priorityClassName"] == "llmop-batch"


@pytest.mark.parametrize("sample", ["gemma4-31b-nvidia", "qwen3-8b-mig-nvidia",
                                    "qwen35-9b-cpu"])
def test_it_goes_where_the_models_pods_may_go_and_is_never_one_of_them(sample: str) -> None:
    objects = _objects(_prefetching(sample_doc(sample)))
    pod = objects["DaemonSet"]["spec"]["template"]
    inference = objects["Deployment"]["spec"]["template"]
    for key in ("nodeSelector", "tolerations", "affinity"):
        assert pod["spec"].get(key) == inference["spec"].get(key), key
    # the Service selects app=<name>: the prefetch pods must not answer it
    assert "app" not in pod["metadata"]["labels"]
    assert objects["Service"]["spec"]["selector"].items() <= \
        inference["metadata"]["labels"].items()
    assert not objects["Service"]["spec"]["selector"].items() <= \
        pod["metadata"]["labels"].items()
    # requests no accelerator
    resources = [c["resources"] for c in pod["spec"]["initContainers"] +
                 pod["spec"]["containers"]]
    assert all(set(r["requests"]) == {"cpu", "memory"} for r in resources)


def test_without_the_flag_there_is_no_daemonset() -> None:
    assert "DaemonSet" not in _objects(sample_doc("gemma4-31b-nvidia"))
