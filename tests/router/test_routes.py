"""The router's table from models and EndpointSlices (pure, milliseconds)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.gateway.settings.config import (
    Balancing,
    HoldSettings,
    Retry,
    Route,
    Upstream,
    check_route_set,
    parse_config,
)
from llm_operator.router.routes import (
    Options,
    Serving,
    Table,
    build,
    in_cluster,
    ready_endpoints,
    service_of,
)

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


def as_written(routes: list[Route]) -> list[dict[str, Any]]:
    """The routes as a gateway config file would say them: the gateway takes them as such."""
    written = [r.model_dump(by_alias=True, exclude_unset=True, mode="json") for r in routes]
    check_route_set(routes)
    parse_config({"routes": written})
    return written


def cluster(models: list[Any], slices: dict[tuple[str, str], list[dict[str, Any]]],
            options: Options | None = None) -> Table:
    """The router's table: each model where its status and its Service's slices say."""
    return build([(m, in_cluster(m, slices.get((m.namespace, service_of(m)), [])))
                  for m in models], options)


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
    slices = {(ns, "gemma"): [piece(8000, ("p", ip, {}))]
              for ns, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2"))}
    table = cluster([second, first], slices)
    assert [(r.name, r.models, r.aliases) for r in table.routes] == [
        ("a/gemma", ["google/gemma-4-31b-it"], ["a/gemma", "gemma"]),
        ("b/gemma", ["b/gemma"], [])]
    # whatever name reached it, the engine is asked for the model it serves
    assert [r.deployments[0].model for r in table.routes] == ["google/gemma-4-31b-it"] * 2
    as_written(table.routes)  # the gateway takes it as it is


def test_a_model_id_wins_over_an_earlier_models_alias() -> None:
    # a model in namespace "google" named like the next one's modelId's second half
    alias = model("qwen35-9b-cpu", "gemma-4-31b-it", "google")
    owner = model("gemma4-31b-nvidia", "gemma", "z")  # modelId google/gemma-4-31b-it
    table = cluster([alias, owner], {})
    assert [(r.models, r.aliases) for r in table.routes] == [
        (["Qwen/Qwen3.5-9B-GGUF"], ["gemma-4-31b-it"]),
        (["google/gemma-4-31b-it"], ["z/gemma", "gemma"])]


def test_local_models_route_to_their_endpoints_and_hold_without_any() -> None:
    ready = model("gemma4-31b-nvidia", "gemma", routing={"strategy": "prefix-hash",
                                                         "prefixChars": 512,
                                                         "loadBoundPercent": 150})
    starting = model("qwen35-9b-cpu", "qwen", status={
        "phase": "Starting", "conditions": [{
            "type": "Ready", "status": "False", "reason": "Starting",
            "message": "0 of 1 replicas ready", "lastTransitionTime": "2026-11-23T00:00:00Z"}]})
    slices = {("ai-models", "gemma"): [piece(8000, ("gemma-0", "10.0.0.1", {}))]}
    table = cluster([ready, starting], slices, Options(hold_seconds=30, keepalive_seconds=2))
    gemma, qwen = table.routes
    assert gemma.upstreams == [Upstream(name="gemma-0", base_url="http://10.0.0.1:8000/v1",
                                        auth="none", model="google/gemma-4-31b-it",
                                        slots=256)]  # vLLM's max_num_seqs: flow control
    assert gemma.balancing == Balancing(strategy="prefix-hash", prefix_chars=512,
                                        load_bound=1.5)
    assert qwen.upstreams == [] and qwen.balancing == Balancing(strategy="least-load")
    assert qwen.hold == HoldSettings(seconds=30, reason="Starting: 0 of 1 replicas ready",
                                     keepalive_seconds=2)
    # a reason longer than a hold says is cut, never a route refused
    long_wait = build([(starting, Serving([], "Downloading: " + "x" * 1100))]).routes[0]
    assert long_wait.hold is not None and len(long_wait.hold.reason) == 1024
    assert table.upstreams == {("ai-models", "gemma"): ["http://10.0.0.1:8000/v1"],
                               ("ai-models", "qwen"): []}


def test_a_pools_members_route_to_the_pools_engine_each_by_its_model_id() -> None:
    pooled = {"inferenceEngine": "llamacpp", "pool": {"name": "small", "maxLoaded": 1},
              "modelSource": {"type": "file", "path": "/m/x.gguf"}}
    one = model("qwen35-9b-cpu", "one", modelId="org/one", **pooled)
    two = model("qwen35-9b-cpu", "two", modelId="org/two", **pooled)
    assert (service_of(one), service_of(model("qwen35-9b-cpu"))) == ("small-pool",
                                                                     "qwen35-9b-cpu")
    slices = {("ai-models", "small-pool"): [piece(8000, ("small-pool-0", "10.0.0.9", {}))]}
    table = cluster([one, two], slices)
    assert [(r.models, [(u.base_url, u.model) for u in r.deployments])
            for r in table.routes] == [
        (["org/one"], [("http://10.0.0.9:8000/v1", "org/one")]),
        (["org/two"], [("http://10.0.0.9:8000/v1", "org/two")])]
    # with several replicas, a member's requests go to the one that has it loaded
    assert {r.balancing.strategy for r in table.routes} == {"model-hash"}


def test_remote_models_go_to_their_gateway_once_proxying_and_failed_ones_are_absent() -> None:
    proxying = model("gpt55-remote", status={"phase": "Proxying",
                                             "endpoint": "http://gpt55.ai-models.svc:8000/v1"})
    failed = model("qwen35-9b-cpu", "broken", status={"phase": "Failed"})
    table = cluster([proxying, failed], {})
    assert [r.upstreams for r in table.routes] == [[Upstream(
        name="gpt55-remote", base_url="http://gpt55.ai-models.svc:8000/v1",
        auth="none", model="gpt-5.5")]]
    assert table.routes[0].balancing == Balancing(strategy="weighted")
    assert table.absent["broken"] == "model ai-models/broken failed: Failed"


def test_adapters_are_routes_of_their_own_by_each_engines_means() -> None:
    vllm = model("llama32-3b-lora-nvidia")
    llama = model("llamacpp-lora-cpu")
    slices = {("ai-models", "llama32-3b-lora"): [piece(8000, ("v-0", "10.0.0.1", {}))],
              ("ai-models", "qwen25-1b-lora"): [piece(8000, ("l-0", "10.0.0.2", {}))]}
    table = cluster([vllm, llama], slices)
    routes = {r["name"]: r for r in as_written(table.routes)}
    sql = routes["ai-models/llama32-3b-lora/text2sql"]
    assert sql["models"] == ["text2sql"] and sql["aliases"] == [] and "setFields" not in sql
    assert sql["upstreams"][0]["model"] == "text2sql"  # vLLM serves it under its name
    pirate = routes["ai-models/qwen25-1b-lora/pirate"]
    assert pirate["upstreams"][0]["model"] == "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
    assert pirate["setFields"] == {"lora": [{"id": 0, "scale": 1.0}]}
    # the base model: no adapter unless the client names one (its own lora field)
    base = routes["ai-models/qwen25-1b-lora"]
    assert base["defaultFields"] == {"lora": [{"id": 0, "scale": 0.0}]}
    # llama-server stops a generation for a client that left only when it streams
    assert base["streamUpstream"] is pirate["streamUpstream"] is True
    assert "streamUpstream" not in routes["ai-models/llama32-3b-lora"]
    assert "defaultFields" not in routes["ai-models/llama32-3b-lora"]
    assert table.labels[("ai-models", "qwen25-1b-lora")] == [
        "ai-models/qwen25-1b-lora", "ai-models/qwen25-1b-lora/pirate"]
    # an adapter's requests take the base model's slots: one flow-control pool
    assert pirate["pool"] == sql["pool"].replace("llama32-3b", "qwen25-1b") == \
        "ai-models/qwen25-1b-lora"
    assert "pool" not in base


def test_an_sglang_adapter_goes_to_the_base_model_with_its_lora_path() -> None:
    sglang = model("llama32-3b-lora-nvidia", inferenceEngine="sglang", engineArgs={})
    slices = {("ai-models", "llama32-3b-lora"): [piece(8000, ("s-0", "10.0.0.1", {}))]}
    routes = {r["name"]: r for r in as_written(cluster([sglang], slices).routes)}
    sql = routes["ai-models/llama32-3b-lora/text2sql"]
    assert sql["models"] == ["text2sql"]
    assert sql["upstreams"][0]["model"] == "meta-llama/Llama-3.2-3B-Instruct"
    assert sql["setFields"] == {"lora_path": "text2sql"}  # SGLang's adapter by name
    assert "defaultFields" not in routes["ai-models/llama32-3b-lora"]  # base: no adapter


def test_llmop_up_builds_the_same_table_for_its_processes_and_proxies() -> None:
    """One machine: adapters as in a cluster, a proxied remote model's own route."""
    llama = model("llamacpp-lora-cpu")
    remote = model("gpt55-remote")
    process = Serving([Upstream(name="p", base_url="http://127.0.0.1:4100/v1", auth="none")])
    proxy = Serving(route=Route.model_validate({
        "models": ["gpt-5.5"], "rateLimit": {"requestsPerMinute": 10},
        "upstream": {"baseUrl": "https://api.openai.com/v1", "model": "gpt-5.5",
                     "apiKey": {"env": "OPENAI"}}}))
    options = Options(retry=Retry(attempts=2))
    table = build([(llama, process), (remote, proxy)], options)
    routes = {r["name"]: r for r in as_written(table.routes)}
    pirate = routes["ai-models/qwen25-1b-lora/pirate"]
    assert pirate["upstreams"][0]["model"] == "Qwen/Qwen2.5-1.5B-Instruct-GGUF"
    assert pirate["setFields"] == {"lora": [{"id": 0, "scale": 1.0}]}
    assert pirate["retry"] == {"attempts": 2}
    proxied = routes["ai-models/gpt55-remote"]
    assert "upstreams" not in proxied and "retry" not in proxied
    assert proxied["rateLimit"] == {"requestsPerMinute": 10}
    assert (proxied["models"], proxied["aliases"]) == (
        ["gpt-5.5"], ["ai-models/gpt55-remote", "gpt55-remote"])


def test_a_models_guardrails_go_with_its_routes_and_its_adapters() -> None:
    rails = {"input": [{"name": "no-pii", "action": "mask", "pii": {}}],
             "output": [{"name": "no-cards", "pii": {"entities": ["CREDIT_CARD"]}}]}
    llama = model("llamacpp-lora-cpu", guardrails=rails)
    table = cluster([llama], {("ai-models", "qwen25-1b-lora"): [
        piece(8000, ("l-0", "10.0.0.2", {}))]})
    # the model's own, unchanged, for the model and its adapter
    assert [r.guardrails for r in table.routes] == [llama.spec.guardrails] * 2
    config = parse_config({"routes": as_written(table.routes)})  # as a file says them
    assert [r.guardrails for r in config.routes] == [llama.spec.guardrails] * 2
    assert all(r.guardrails is not None and r.guardrails.names == ("no-pii", "no-cards")
               for r in config.routes)
