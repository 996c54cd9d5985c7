"""Pools across LLMModels: members must agree, a pool has several, and they fit together."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.pools import pool_problems, pools
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.planner import plan as plan_of
from llm_operator.profiles.pool import ROUTER_GIB, across_pools, plan_pool

from samples import REPO, load_yaml

POOL_EXAMPLE = REPO / "examples" / "cluster" / "model-pool"


# a vLLM pool's member (sleep mode, on a GPU): llama.cpp pools run on the CPU only
VLLM: dict[str, Any] = {"inferenceEngine": "vllm", "acceleratorVendor": "nvidia",
                        "quantization": "BF16", "resources": {"acceleratorCount": 1},
                        "modelSource": {"type": "file", "path": "/models/weights"}}


def member(name: str, *, namespace: str = "ai-models", pool: dict[str, Any] | None = None,
           **spec: Any) -> LLMModel:
    return parse_llmmodel({
        "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"modelId": f"id-{name}", "deploymentMode": "local",
                 "acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
                 "quantization": "GGUF-Q4_K_M", "totalParametersBillions": 1,
                 "contextWindowK": 4, "resources": {"acceleratorCount": 0, "memoryGiB": 4},
                 "modelSource": {"type": "file", "path": f"/models/{name}.gguf"},
                 "pool": {"name": "small", "maxLoaded": 2, **(pool or {})}, **spec}})


def _problems(models: list[LLMModel]) -> dict[str, list[str]]:
    return {name: [str(p) for p in found]
            for (_, name), found in across_pools(models, "among the documents given").items()}


def test_the_example_is_one_pool_of_three_that_agree() -> None:
    models = [parse_llmmodel(load_yaml(p)) for p in sorted(POOL_EXAMPLE.glob("*.yaml"))]
    assert [m.name for m in pools(models)[("ai-models", "gemma-small")]] == [
        "gemma-pool-chat", "gemma-pool-long", "gemma-pool-qa"]
    assert _problems(models) == {}


def _alone(namespace: str) -> str:
    return (f"spec.pool.name: pool small has no other member among the documents given "
            f"(namespace {namespace}): a pool shares one engine among several models; "
            "declare the others with the same pool, or remove pool")


def _differs(field: str, mine: str, theirs: str) -> str:
    return (f"{field}: {mine} here but {theirs} in a: every member of pool small declares "
            "the same")


@pytest.mark.parametrize(("case", "models", "expected"), [
    ("three that agree", [member("a"), member("b"), member("c")], {}),
    ("a pool of one", [member("a")], {"a": [_alone("ai-models")]}),
    ("one pool name in two namespaces: two pools of one",
     [member("a"), member("b", namespace="other")],
     {"a": [_alone("ai-models")], "b": [_alone("other")]}),
    ("another maxLoaded", [member("a"), member("b", pool={"maxLoaded": 3})],
     {"b": [_differs("spec.pool.maxLoaded", "3", "2")]}),
    ("another memoryGiB", [member("a", pool={"memoryGiB": 8}), member("b")],
     {"b": [_differs("spec.pool.memoryGiB", "unset", "8")]}),
    ("another minimum residency", [member("a", pool={"minResidencySeconds": 30}),
                                   member("b", pool={"minResidencySeconds": 10})],
     {"b": [_differs("spec.pool.minResidencySeconds", "10", "30")]}),
    ("two pinned of three with maxLoaded 2",
     [member("a", pool={"pinned": True}), member("b", pool={"pinned": True}), member("c")],
     {m: ["spec.pool.pinned: 2 members of pool small are pinned and maxLoaded is 2: no place "
          "is left for its other members; pin fewer, or raise maxLoaded"] for m in "ab"}),
    ("one pinned of three", [member("a", pool={"pinned": True}), member("b"), member("c")], {}),
    ("every member pinned, more than maxLoaded",
     [member(n, pool={"pinned": True, "maxLoaded": 1}) for n in "ab"],
     {m: ["spec.pool.pinned: 2 members of pool small are pinned and maxLoaded is 1: no place "
          "is left for its other members; pin fewer, or raise maxLoaded"] for m in "ab"}),
    ("every member pinned, all loaded", [member(n, pool={"pinned": True}) for n in "ab"], {}),
    ("a swap budget on one member only", [member("a"), member("b", pool={
        "maxSwapsPerMinute": 6})], {"b": [_differs("spec.pool.maxSwapsPerMinute", "6", "unset")]}),
    ("another vendor", [member("a", **VLLM), member("b", **{**VLLM, "acceleratorVendor": "amd"})],
     {"b": [_differs("spec.acceleratorVendor", "amd", "nvidia")]}),
])
def test_members_that_cannot_share_an_engine_are_refused_with_the_field_named(
        case: str, models: list[LLMModel], expected: dict[str, list[str]]) -> None:
    assert _problems(models) == expected


def test_a_pool_needs_its_largest_members_loaded_together() -> None:
    small, large = member("a"), member("b", totalParametersBillions=3)
    plan = plan_pool([small, large, member("c")])
    assert plan.members[0][0] == "b"
    assert plan.need_gib == pytest.approx(ROUTER_GIB + plan.members[0][1] + plan.members[1][1])


@pytest.mark.parametrize(("case", "memory", "expected"), [
    ("room for the two largest", 16, {}),
    ("a member larger than the pool", 1, {"a": "spec.pool.memoryGiB",
                                          "b": "spec.pool.memoryGiB",
                                          "c": "spec.pool.memoryGiB"}),
    ("each fits, two together do not", 2, {"a": "spec.pool.maxLoaded",
                                           "b": "spec.pool.maxLoaded"}),
])
def test_a_pools_memory_refuses_what_cannot_be_loaded(
        case: str, memory: int, expected: dict[str, str]) -> None:
    models = [member(n, pool={"memoryGiB": memory}) for n in "abc"]
    sizes = dict(plan_pool(models).members)
    assert 1 < sizes["a"] < 2  # more than 1 GiB; one fits in 2 GiB, two do not
    found = _problems(models)
    assert {n: [p.split(":")[0] for p in lines] for n, lines in found.items()} == {
        n: [field] for n, field in expected.items()}


def test_problems_name_the_other_members_where_they_were_looked_for() -> None:
    (problem,) = pool_problems([member("a")], "in the cluster")[("ai-models", "a")]
    assert "no other member in the cluster" in problem.message


def test_models_without_pool_are_in_no_pool() -> None:
    alone = parse_llmmodel(load_yaml(REPO / "examples" / "cluster" / "gemma-270m.yaml"))
    assert pools([alone]) == {}


@pytest.mark.parametrize(("case", "cpus", "max_loaded", "expected"), [
    ("two of three loaded, equal", [500, 500, 500], 2, 1000),
    ("the two asking most", [250, 2000, 1000], 2, 3000),
    ("one loaded at a time", [250, 2000, 1000], 1, 2000),
    ("as many loaded as members", [250, 500], 2, 750),
])
def test_a_pools_cpu_is_what_its_loaded_members_ask_together(
        case: str, cpus: list[int], max_loaded: int, expected: int) -> None:
    models = [member(f"m{i}", pool={"maxLoaded": max_loaded},
                     resources={"acceleratorCount": 0, "memoryGiB": 4, "cpuMillicores": c})
              for i, c in enumerate(cpus)]
    assert plan_pool(models).cpu_millicores == expected


def test_the_weights_that_may_sleep_at_once_are_all_but_the_loaded_members_the_largest(
        ) -> None:
    sizes = {"a": 1, "b": 3, "c": 7}
    models = [member(n, totalParametersBillions=b) for n, b in sizes.items()]
    plan = plan_pool(models)  # maxLoaded 2: one asleep, at worst the largest
    (largest,) = [m for m in models if m.name == "c"]
    estimate = plan_of(largest).estimate
    assert estimate is not None
    assert plan.asleep_gib == pytest.approx(estimate.weights_gib)
