"""Model images (modelSource.type oci): an image volume, a modelcar sidecar, or an oras pull."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.engines import CACHE_DIR, SOURCE_DIR
from llm_operator.profiles.settings import ModelImages, Settings
from llm_operator.render import render

from k8s_schemas import validate_object
from samples import REPO, load_yaml

GOLDEN = Path(__file__).parent / "golden"
EXAMPLE = REPO / "examples" / "cluster" / "gemma-270m-image.yaml"
IMAGE = "llmop.local/models/gemma-3-270m:q4_k_m"


def _render(mount: str, doc: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    settings = Settings(model_images=ModelImages(mount=mount))  # type: ignore[arg-type]
    return render(parse_llmmodel(doc or load_yaml(EXAMPLE)), settings,
                  owner_uid="00000000-0000-4000-8000-000000000001")


def _pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def _containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in pod["initContainers"] + pod["containers"]}


@pytest.mark.parametrize("mount", ["modelcar", "pull"])
def test_golden_manifests_of_each_mount(mount: str, update_golden: bool) -> None:
    text = "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in _render(mount))
    golden = GOLDEN / f"gemma-270m-image-{mount}.yaml"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text(), f"{mount} changed: review, then `make golden`"


@pytest.mark.parametrize("mount", ["auto", "image-volume", "modelcar", "pull"])
def test_every_mount_validates_against_official_schemas(mount: str) -> None:
    assert [e for o in _render(mount) for e in validate_object(o)] == []


@pytest.mark.parametrize("mount", ["auto", "image-volume"])
def test_an_image_volume_is_mounted_read_only_where_the_download_would_be(mount: str) -> None:
    objects = _render(mount)
    pod = _pod(objects)
    assert {"name": "model-image", "image": {"reference": IMAGE, "pullPolicy": "IfNotPresent"}} \
        in pod["volumes"]
    # nothing is downloaded: no fetch step and no claim sized for the weights
    assert {"name": "model-cache", "emptyDir": {}} in pod["volumes"]
    assert "PersistentVolumeClaim" not in {o["kind"] for o in objects}
    containers = _containers(pod)
    assert list(containers) == ["model-verify", "model-prepare", "inference-server"]
    for name in containers:
        assert {"name": "model-image", "readOnly": True, "mountPath": SOURCE_DIR,
                "subPath": "models"} in containers[name]["volumeMounts"]
    assert "shareProcessNamespace" not in pod


def test_a_modelcar_shares_the_images_models_through_the_process_namespace() -> None:
    objects = _render("modelcar")
    pod = _pod(objects)
    assert pod["shareProcessNamespace"] is True
    car = pod["initContainers"][0]  # first: the checks after it read through its link
    assert car["name"] == "model-image"
    assert car["image"] == IMAGE
    assert car["restartPolicy"] == "Always"  # a native sidecar: it runs beside the engine
    # $$$$: Kubernetes reads $$ as an escaped $, so the shell gets $$, its own pid
    assert car["command"] == ["sh", "-c", f"ln -sfn /proc/$$$$/root/models {SOURCE_DIR} "
                              "&& exec sleep infinity"]
    assert car["startupProbe"]["exec"]["command"] == ["test", "-d", f"{SOURCE_DIR}/"]
    assert {"name": "model-cache", "mountPath": CACHE_DIR} in car["volumeMounts"]
    # same user as the engine and the checks: /proc/<pid>/root is the owner's to read
    users = {c["securityContext"].get("runAsUser") for c in _containers(pod).values()}
    assert users == {65532}
    assert {"name": "model-cache", "emptyDir": {}} in pod["volumes"]
    assert not any("image" in v for v in pod["volumes"])
    assert "PersistentVolumeClaim" not in {o["kind"] for o in objects}


def test_a_modelcar_beside_an_engine_that_runs_as_root_runs_as_its_images_user() -> None:
    doc = copy.deepcopy(load_yaml(EXAMPLE))
    doc["spec"].update(inferenceEngine="vllm", quantization="BF16",
                       resources={"acceleratorCount": 0, "cpuMillicores": 2000,
                                  "memoryGiB": 6})
    doc["spec"].pop("engineArgs")
    del doc["spec"]["modelSource"]["sha256"]
    pod = _pod(_render("modelcar", doc))
    assert list(_containers(pod)) == ["model-image", "inference-server"]
    for container in _containers(pod).values():
        assert "runAsUser" not in container["securityContext"], container["name"]


def test_pull_keeps_the_oras_download_into_the_cache() -> None:
    objects = _render("pull")
    pod = _pod(objects)
    fetch = pod["initContainers"][0]
    assert fetch["name"] == "model-fetch"
    assert fetch["command"][-4:] == ["oras", "pull", IMAGE, "--output", SOURCE_DIR][-4:]
    assert "PersistentVolumeClaim" in {o["kind"] for o in objects}
    assert not any("image" in v for v in pod["volumes"])
