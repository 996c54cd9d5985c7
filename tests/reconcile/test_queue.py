"""The GPU queue, pure: who starts now, who waits and in what order, on what the nodes offer."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile import workloads
from llm_operator.reconcile.queue import (
    Admission,
    Claim,
    Node,
    admit,
    claim_of,
    devices_by_node,
    node_of,
)
from llm_operator.render import render

from samples import sample_doc

GPU = "nvidia.com/gpu"
NVIDIA = {"nvidia.com/gpu.present": "true"}


def node(name: str, gpus: int, labels: dict[str, str] | None = None,
         schedulable: bool = True) -> Node:
    return Node(name, {GPU: gpus}, {**NVIDIA, **(labels or {})}, schedulable)


def claim(name: str, count: int = 1, replicas: int = 1, priority: str = "normal",
          created: str = "2026-11-23T10:00:00Z", running: bool = False,
          **more: Any) -> Claim:
    pods = more.pop("pods", (count,) * replicas)
    return Claim(("ai", name), GPU, pods, priority, created, running,
                 more.pop("node_selector", NVIDIA), **more)


def outcome(result: dict[tuple[str, str], Admission]) -> dict[str, tuple[bool, int | None]]:
    return {k[1]: (a.admitted, a.position) for k, a in sorted(result.items())}


CASES: list[tuple[str, list[Node], list[Claim], dict[str, tuple[bool, int | None]]]] = [
    ("room for both", [node("n1", 4)], [claim("a", 2), claim("b", 2)],
     {"a": (True, None), "b": (True, None)}),
    ("running models keep what they hold", [node("n1", 4)],
     [claim("old", 4, running=True), claim("new", 1)],
     {"new": (False, 1), "old": (True, None)}),
    ("priority first, then creation time", [node("n1", 2)],
     [claim("early-normal", 2, created="2026-11-23T09:00:00Z"),
      claim("late-high", 2, priority="high", created="2026-11-23T11:00:00Z"),
      claim("late-normal", 2, created="2026-11-23T10:00:00Z")],
     {"early-normal": (False, 1), "late-high": (True, None), "late-normal": (False, 2)}),
    ("the head of a queue goes first: nothing smaller overtakes it", [node("n1", 3)],
     [claim("big", 4, created="2026-11-23T09:00:00Z"),
      claim("small", 1, created="2026-11-23T10:00:00Z")],
     {"big": (False, None), "small": (True, None)}),  # big can never fit: not a head
    ("a head that could fit later blocks its queue", [node("n1", 4)],
     [claim("holder", 2, running=True), claim("big", 4, created="2026-11-23T09:00:00Z"),
      claim("small", 1, created="2026-11-23T10:00:00Z")],
     {"big": (False, 1), "holder": (True, None), "small": (False, 2)}),
    ("replicas need a node each with room: tensor parallel stays on one node",
     [node("n1", 4), node("n2", 4)],
     [claim("tp4x2", 4, replicas=2, created="2026-11-23T09:00:00Z"), claim("one", 1)],
     {"one": (False, 1), "tp4x2": (True, None)}),
    ("node selectors and required affinity", [
        node("h100", 8, {"nvidia.com/gpu.memory": "81559"}),
        node("l4", 8, {"nvidia.com/gpu.memory": "23034"})],
     [claim("needs-80g", 8, replicas=1, affinity=((
         {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},),)),
      claim("second-80g", 1, created="2026-11-23T11:00:00Z", affinity=((
          {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40000"]},),))],
     {"needs-80g": (True, None), "second-80g": (False, 1)}),
    ("cordoned nodes give nothing", [node("n1", 8, schedulable=False)], [claim("a", 1)],
     {"a": (False, None)}),
    ("another vendor's queue is separate", [
        node("n1", 1), Node("m1", {"amd.com/gpu": 2}, {"amd.com/gpu.present": "true"})],
     [claim("nv-holder", 1, running=True), claim("nv", 1),
      Claim(("ai", "amd"), "amd.com/gpu", (2,), node_selector={"amd.com/gpu.present": "true"})],
     {"amd": (True, None), "nv": (False, 1), "nv-holder": (True, None)}),
    ("a replica across 2 nodes needs both nodes' cards", [node("n1", 8), node("n2", 8)],
     [claim("405b", pods=(8, 8), created="2026-11-23T09:00:00Z"), claim("one", 1)],
     {"405b": (True, None), "one": (False, 1)}),
    ("a group that no set of nodes holds never blocks", [node("n1", 8), node("n2", 8)],
     [claim("3-nodes", pods=(8, 8, 8), created="2026-11-23T09:00:00Z"), claim("one", 1)],
     {"3-nodes": (False, None), "one": (True, None)}),
    ("prefill and decode pods of their own sizes", [node("n1", 8)],
     [claim("pd", pods=(4, 2, 2), created="2026-11-23T09:00:00Z"), claim("two", 2)],
     {"pd": (True, None), "two": (False, 1)}),
]


@pytest.mark.parametrize(("case", "nodes", "claims", "expected"), CASES,
                         ids=[c[0] for c in CASES])
def test_who_starts_and_who_waits(case: str, nodes: list[Node], claims: list[Claim],
                                  expected: dict[str, tuple[bool, int | None]]) -> None:
    assert outcome(admit(claims, nodes)) == expected


def test_reasons_say_what_is_needed_and_what_is_free() -> None:
    result = admit([claim("holder", 3, running=True), claim("head", 2, priority="high"),
                    claim("next", 1)], [node("n1", 4)])
    assert result[("ai", "head")].reason == \
        "waiting for accelerators: needs 1 x 2 nvidia.com/gpu; 1 free on matching nodes"
    assert result[("ai", "next")].reason == ("waiting for accelerators: needs 1 x 1 "
                                             "nvidia.com/gpu; 1 free on matching nodes, "
                                             "behind ai/head (high)")
    never = admit([claim("huge", 16)], [node("n1", 8)])[("ai", "huge")]
    assert never.reason.startswith("needs 1 x 16 nvidia.com/gpu, and no set of matching "
                                   "schedulable nodes could ever hold it (the largest offers 8)")


def test_a_node_object_becomes_its_capacity() -> None:
    obj = {"metadata": {"name": "gpu-1", "labels": NVIDIA},
           "spec": {"unschedulable": True},
           "status": {"allocatable": {GPU: "8", "cpu": "7500m", "memory": "31Gi",
                                      "pods": "110"}}}
    parsed = node_of(obj)
    assert (parsed.name, parsed.allocatable[GPU], parsed.schedulable) == ("gpu-1", 8, False)
    assert "cpu" not in parsed.allocatable


def test_mixed_pods_are_named_by_size() -> None:
    assert claim("pd", pods=(4, 2, 2, 2)).needs == "1 x 4 + 3 x 2 nvidia.com/gpu"
    assert claim("plain", 2, replicas=3).needs == "3 x 2 nvidia.com/gpu"


@pytest.mark.parametrize(("stem", "workload", "pods"), [
    ("gemma4-31b-nvidia", "deployments", (1,)),
    ("llama-405b-multinode-nvidia", "deployments", (8, 8)),  # one group of 2 nodes
    ("llama-70b-pd-nvidia", "deployments", (2, 2, 2, 2)),  # 1 prefill + 3 decode pods
    ("llama-70b-pd-nvidia", "disaggregatedset", (2, 2, 2, 2)),
])
def test_a_models_claim_counts_every_pod_it_will_run(stem: str, workload: str,
                                                     pods: tuple[int, ...]) -> None:
    model = parse_llmmodel(sample_doc(stem))
    settings = Settings.model_validate({"disaggregation": {"workload": workload}})
    served = workloads.rendered(render(model, settings), model.name)
    found = claim_of(model, served, running=False)
    assert found is not None and found.pods == pods
    assert found.node_selector == {"nvidia.com/gpu.present": "true"}


H100 = "NVIDIA-H100-80GB-HBM3"  # as GPU Feature Discovery labels the product


@pytest.mark.parametrize(("sharing", "strategy", "resource", "product"), [
    ({"migProfile": "3g.40gb"}, "mixed", "nvidia.com/mig-3g.40gb", H100),
    ({"migProfile": "3g.40gb"}, "single", "nvidia.com/gpu", f"{H100}-MIG-3g.40gb"),
    ({"timeSliced": True}, "mixed", "nvidia.com/gpu.shared", f"{H100}-SHARED"),
])
def test_a_shared_gpu_is_claimed_as_the_resource_the_pods_ask_for(
        sharing: dict[str, Any], strategy: str, resource: str, product: str) -> None:
    doc = sample_doc("gemma4-31b-nvidia")
    doc["spec"]["resources"].update(acceleratorCount=1, gpuSharing=sharing,
                                    preferredAcceleratorModel="NVIDIA H100 80GB HBM3")
    model = parse_llmmodel(doc)
    settings = Settings.model_validate({"gpus": {"migStrategy": strategy,  # the GPU operator's
                                                 "sharedResource": "nvidia.com/gpu.shared"}})
    found = claim_of(model, workloads.rendered(render(model, settings), model.name),
                     running=False)
    assert found is not None and (found.resource, found.pods) == (resource, (1,))
    # a node with three such instances free takes it; one with whole GPUs only does not
    gfd = {**NVIDIA, "nvidia.com/gpu.product": product, "nvidia.com/gpu.memory": "81559"}
    with_instances = Node("mig", {resource: 3}, gfd)
    whole = Node("whole", {GPU: 8}, {**NVIDIA, "nvidia.com/gpu.product": H100,
                                     "nvidia.com/gpu.memory": "81559"})
    result = admit([found], [whole, with_instances])
    assert result[found.key].admitted
    assert not admit([found], [whole])[found.key].admitted


def _slice(node: str | None, devices: int, generation: int = 1, driver: str = "gpu.nvidia.com",
           pool: str | None = None) -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node,
                     "pool": {"name": pool or node or "shared", "generation": generation,
                              "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{i}"} for i in range(devices)]}}


@pytest.mark.parametrize(("case", "slices", "expected"), [
    ("a node's devices", [_slice("n1", 4)], {"n1": {"devices/nvidia": 4}}),
    ("two slices of one pool add up", [_slice("n1", 2, pool="p"), _slice("n1", 2, pool="p")],
     {"n1": {"devices/nvidia": 4}}),
    ("an older generation is being replaced", [_slice("n1", 8, generation=1),
                                               _slice("n1", 2, generation=2)],
     {"n1": {"devices/nvidia": 2}}),
    ("another vendor's driver", [_slice("n1", 1, driver="gpu.amd.com")],
     {"n1": {"devices/amd": 1}}),
    ("a driver nobody configured", [_slice("n1", 4, driver="fpga.example.com")], {}),
    ("devices not on one node (network-attached)", [_slice(None, 4)], {}),
])
def test_dra_devices_are_counted_from_the_drivers_resource_slices(
        case: str, slices: list[dict[str, Any]], expected: dict[str, dict[str, int]]) -> None:
    vendors = {"gpu.nvidia.com": "nvidia", "gpu.amd.com": "amd"}
    assert devices_by_node(slices, vendors) == expected


def test_a_dra_model_claims_devices_and_waits_for_a_node_that_publishes_them() -> None:
    model = parse_llmmodel(sample_doc("qwen3-32b-dra-nvidia"))
    found = claim_of(model, workloads.rendered(render(model, Settings()), model.name),
                     running=False)
    assert found is not None
    assert (found.resource, found.pods, found.node_selector) == ("devices/nvidia", (2,), {})
    devices = devices_by_node([_slice("gpu-1", 1), _slice("gpu-2", 2)],
                              {"gpu.nvidia.com": "nvidia"})
    nodes = [node_of({"metadata": {"name": n}, "status": {"allocatable": {"cpu": "8"}}},
                     devices) for n in ("cpu-only", "gpu-1", "gpu-2")]
    assert admit([found], nodes)[found.key].reason == "placed on gpu-2"
    waiting = admit([found], nodes[:2])[found.key]
    assert not waiting.admitted and "needs 1 x 2 devices/nvidia" in waiting.reason
