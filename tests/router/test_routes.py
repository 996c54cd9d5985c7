"""The router's table from models and EndpointSlices (pure, milliseconds)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.gateway.config import parse_config
from llm_operator.router.routes import Options, build, ready_endpoints

from samples import sample_doc


def model(stem: str, name: str | None = None, namespace: str = "ai-models",
          status: dict[str, Any] | None = None, **spec: Any) -> Any:
    doc = copy.deepcopy(sample_doc(stem))
    doc["metadata"].update(name=name or doc["metadata"]["name"], namespace=namespace)
    doc["spec"].update(spec)
    if status is not None:
        doc["status"] = status
    return parse_llmmodel(doc)


def piece(port: int | None, *endpoints: tuple[str, str, dict[str, bool]]) -> dict[str, Any]:
    return {"ports": [] if port is None else [{"name": "http", "port": port}],
            "endpoints": [{"addresses": [address], "targetRef": {"kind": "Pod", "name": pod},
                           "conditions": conditions} for pod, address, conditions in endpoints]}


@pytest.mark.parametrize(("slices", "expected"), [
    ([piece(8000, ("p0", "10.0.0.1", {"ready": True}), ("p1", "10.0.0.2", {}))],
     [("p0", "http://10.0.0.1:8000/v1"), ("p1", "http://10.0.0.2:8000/v1")]),
    ([piece(8000, ("p0", "10.0.0.1", {"ready": False}),
            ("p1", "10.0.0.2", {"ready": True, "terminating": True}))], []),
    ([piece(None, ("p0", "10.0.0.1", {}))], []),  # no port named http
    ([piece(8000, ("p0", "fd00::5", {}))], [("p0", "http://[fd00::5]:8000/v1")]),
    ([piece(8000, ("p0", "10.0.0.1", {})), piece(8000, ("p0", "10.0.0.1", {}))],
     [("p0", "http://10.0.0.1:8000/v1")]),  # the same endpoint in two slices: once
])
def test_ready_endpoints(slices: list[dict[str, Any]], expected: list[tuple[str, str]]) -> None:
    assert ready_endpoints(slices) == expected


def test_names_go_to_the_first_model_and_namespace_name_always_works() -> None:
    first = model("gemma4-31b-nvidia", "gemma", "a")
    second = model("gemma4-31b-nvidia", "gemma", "b")
    table = build([second, first], {})
    assert [(r["name"], r["models"]) for r in table.routes] == [
        ("a/gemma", ["google/gemma-4-31b-it", "gemma", "a/gemma"]), ("b/gemma", ["b/gemma"])]
    parse_config({"routes": table.routes})  # the gateway takes it as it is


def test_local_models_route_to_their_endpoints_and_hold_without_any() -> None:
    ready = model("gemma4-31b-nvidia", "gemma", routing={"strategy": "prefix-hash",
                                                         "prefixChars": 512,
                                                         "loadBoundPercent": 150})
    starting = model("qwen35-9b-cpu", "qwen", status={
        "phase": "Starting", "conditions": [{
            "type": "Ready", "status": "False", "reason": "Starting",
            "message": "0 of 1 replicas ready", "lastTransitionTime": "2026-11-23T00:00:00Z"}]})
    slices = {("ai-models", "gemma"): [piece(8000, ("gemma-0", "10.0.0.1", {}))]}
    table = build([ready, starting], slices, Options(hold_seconds=30, keepalive_seconds=2))
    gemma, qwen = table.routes
    assert gemma["upstreams"] == [{"name": "gemma-0", "baseUrl": "http://10.0.0.1:8000/v1",
                                   "auth": "none"}]
    assert gemma["balancing"] == {"strategy": "prefix-hash", "prefixChars": 512,
                                  "loadBound": 1.5}
    assert qwen["upstreams"] == [] and qwen["balancing"] == {"strategy": "least-load"}
    assert qwen["hold"] == {"seconds": 30, "reason": "Starting: 0 of 1 replicas ready",
                            "keepaliveSeconds": 2}
    assert table.upstreams == {("ai-models", "gemma"): ["http://10.0.0.1:8000/v1"],
                               ("ai-models", "qwen"): []}


def test_remote_models_go_to_their_gateway_once_proxying_and_failed_ones_are_absent() -> None:
    proxying = model("gpt55-remote", status={"phase": "Proxying",
                                             "endpoint": "http://gpt55.ai-models.svc:8000/v1"})
    failed = model("qwen35-9b-cpu", "broken", status={"phase": "Failed"})
    table = build([proxying, failed], {})
    assert [r["upstreams"] for r in table.routes] == [[{
        "name": "gpt55-remote", "baseUrl": "http://gpt55.ai-models.svc:8000/v1",
        "auth": "none"}]]
    assert table.routes[0]["balancing"] == {"strategy": "weighted"}
    assert table.absent["broken"] == "model ai-models/broken failed: Failed"


def test_adapters_are_routes_of_their_own_by_each_engines_means() -> None:
    vllm = model("llama32-3b-lora-nvidia")
    llama = model("llamacpp-lora-cpu")
    slices = {("ai-models", "llama32-3b-lora"): [piece(8000, ("v-0", "10.0.0.1", {}))],
              ("ai-models", "qwen25-1b-lora"): [piece(8000, ("l-0", "10.0.0.2", {}))]}
    table = build([vllm, llama], slices)
    routes = {r["name"]: r for r in table.routes}
    sql = routes["ai-models/llama32-3b-lora/text2sql"]
    assert sql["models"] == ["text2sql"] and "setFields" not in sql
    assert "model" not in sql["upstreams"][0]  # vLLM serves the adapter under its name
    pirate = routes["ai-models/qwen25-1b-lora/pirate"]
    assert pirate["upstreams"][0]["model"] == "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
    assert pirate["setFields"] == {"lora": [{"id": 0, "scale": 1.0}]}
    assert table.labels[("ai-models", "qwen25-1b-lora")] == [
        "ai-models/qwen25-1b-lora", "ai-models/qwen25-1b-lora/pirate"]
    parse_config({"routes": table.routes})
