"""settings.compileCache: every vLLM pod mounts the node's compile cache over vLLM's own."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from llm_operator.api.pools import pools
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.engines import VLLM_CACHE_ROOT
from llm_operator.profiles.pool import plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.render import render
from llm_operator.render.pool_engine import pool_objects

from k8s_schemas import validate_object
from samples import REPO, load_yaml

CLUSTER = REPO / "examples" / "cluster"
ROOT = "/var/cache/llm-operator/compile"
ON = Settings.model_validate({"compileCache": {"hostPath": ROOT}})
VOLUME = {"name": "compile-cache",
          "hostPath": {"path": f"{ROOT}/ai-models", "type": "DirectoryOrCreate"}}
MOUNT = {"name": "compile-cache", "mountPath": VLLM_CACHE_ROOT}


def _pods(example: str, settings: Settings) -> list[dict[str, Any]]:
    """The pod specs ``example`` (a file, or a pool's directory) renders to."""
    path = CLUSTER / example
    if path.is_dir():
        (members,) = pools([parse_llmmodel(load_yaml(p))
                            for p in sorted(path.glob("*.yaml"))]).values()
        objects = pool_objects(list(members), plan_pool(list(members)), settings)
    else:
        objects = render(parse_llmmodel(load_yaml(path)), settings, owner_uid="uid")
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] == "Deployment"]
    for group in (o["spec"]["leaderWorkerTemplate"] for o in objects
                  if o["kind"] == "LeaderWorkerSet"):
        pods += [group["leaderTemplate"]["spec"], group["workerTemplate"]["spec"]]
    assert pods, example
    return pods


@pytest.mark.parametrize(("example", "pods"), [
    ("gemma-270m-vllm.yaml", 1),           # one pod per replica
    ("gemma-270m-vllm-2-nodes.yaml", 2),   # the group's leader and its worker
    ("gemma-270m-vllm-hf.yaml", 1),        # downloaded: the cache is a claim, the mount in it
    ("model-pool-vllm", 1),                # a pool's members in one pod
])
def test_every_vllm_server_mounts_the_namespaces_directory_over_vllms_cache(
        example: str, pods: int) -> None:
    rendered = _pods(example, ON)
    assert len(rendered) == pods
    for pod in rendered:
        assert VOLUME in pod["volumes"]
        (server,) = [c for c in pod["containers"] if c["name"].startswith("inference")
                     or c["name"] == "pool-server"]
        assert MOUNT in server["volumeMounts"]
        # inside the model's cache volume, where vLLM's environment already points
        assert any(VLLM_CACHE_ROOT.startswith(m["mountPath"] + "/")
                   for m in server["volumeMounts"])


@pytest.mark.parametrize(("example", "settings"), [
    ("gemma-270m-vllm.yaml", Settings()),  # off unless set
    ("gemma-270m.yaml", ON),               # llama.cpp compiles nothing at start
])
def test_no_compile_cache_where_it_is_off_or_the_engine_compiles_nothing(
        example: str, settings: Settings) -> None:
    for pod in _pods(example, settings):
        assert all(v["name"] != "compile-cache" for v in pod["volumes"])


def test_the_deployment_with_the_cache_validates_against_official_schemas() -> None:
    objects = render(parse_llmmodel(load_yaml(CLUSTER / "gemma-270m-vllm.yaml")), ON,
                     owner_uid="uid")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert validate_object(deployment) == []


@pytest.mark.parametrize("path", ["var/cache", "/", "/var/cache/", "/var/ca che"])
def test_a_host_path_that_is_not_an_absolute_directory_is_refused_with_its_setting(
        path: str) -> None:
    with pytest.raises(ValidationError) as refused:
        Settings.model_validate({"compileCache": {"hostPath": path}})
    assert "compileCache.hostPath" in str(refused.value)

