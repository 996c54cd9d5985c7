"""A pool's engine in a cluster: its objects from its members (golden, official schemas)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.pools import pools
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.pool import plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.render.pool_engine import member_problems, pool_objects

from k8s_schemas import validate_object
from samples import REPO, load_yaml

GOLDEN = Path(__file__).parent / "golden" / "model-pool.yaml"
POOL = REPO / "examples" / "cluster" / "model-pool"
UIDS = {"gemma-pool-chat": "00000000-0000-4000-8000-000000000011",
        "gemma-pool-long": "00000000-0000-4000-8000-000000000012",
        "gemma-pool-qa": "00000000-0000-4000-8000-000000000013"}


def _objects() -> list[dict[str, Any]]:
    members = []
    for path in sorted(POOL.glob("*.yaml")):
        doc = load_yaml(path)
        doc["metadata"]["uid"] = UIDS[doc["metadata"]["name"]]
        members.append(parse_llmmodel(doc))
    (group,) = pools(members).values()
    return pool_objects(group, plan_pool(group), Settings())


def test_the_example_pool_renders_as_its_golden_file(update_golden: bool) -> None:
    text = "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in _objects())
    if update_golden:
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "model-pool changed: review, then `make golden`"


def test_every_pool_object_validates_against_official_schemas() -> None:
    assert [e for o in _objects() for e in validate_object(o)] == []


def test_every_member_owns_the_pools_objects_and_none_is_their_controller() -> None:
    for obj in _objects():
        owners = obj["metadata"]["ownerReferences"]
        assert {o["uid"] for o in owners} == set(UIDS.values())
        assert not any(o.get("controller") for o in owners)


def test_a_member_not_on_the_node_is_refused_with_the_field_named() -> None:
    doc = load_yaml(POOL / "gemma-pool-qa.yaml")
    doc["spec"]["modelSource"] = {"type": "huggingface"}
    doc["spec"]["modelId"] = "ggml-org/gemma-3-270m-GGUF"
    (problem,) = member_problems(parse_llmmodel(doc))
    assert problem.path == "spec.modelSource"
    assert "GGUF files on the node so far" in problem.message
