"""What `llmop up` decides for each model on a given machine (pure, milliseconds)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.placement import (
    LocalServe,
    Machine,
    NotServed,
    RemoteProxy,
    arrange,
    decide,
    file_does_not_fit,
    key_env,
)

from samples import REPO, load_yaml, local_doc, sample_doc

LAPTOP = Machine(cpus=8, memory_gib=16.0)
CLUSTER_VLLM = REPO / "examples" / "cluster" / "gemma-270m-vllm.yaml"
GPU_BOX = Machine(cpus=32, memory_gib=256.0, accelerators=frozenset({"nvidia"}))


def gemma(**spec: Any) -> Any:
    doc = copy.deepcopy(local_doc("gemma3-270m"))
    doc["spec"].update(spec)
    return parse_llmmodel(doc)


def test_the_embedded_default_runs_llama_server_as_a_pod_would_on_loopback() -> None:
    decision = decide(gemma(), LAPTOP, env=())
    assert isinstance(decision, LocalServe)
    assert decision.ignored == ()
    assert decision.slots == 8
    assert decision.server_args("/m.gguf", 4100) == [
        "--model", "/m.gguf", "--alias", "gemma-3-270m", "--host", "127.0.0.1",
        "--port", "4100", "--metrics", "--ctx-size", "32768", "--threads", "2",
        "--parallel", "8", "--cache-ram", "256", "--n-predict", "256", "--chat-template",
        "gemma", "--no-jinja"]


@pytest.mark.parametrize(("engine_args", "engine", "flags", "ignored"), [
    ({}, "llamacpp", ["--ctx-size", "32768", "--threads", "2", "--parallel", "1",
                      "--cache-ram", "256"], ()),
    ({"threads": "6", "flash-attn": "true"}, "llamacpp",
     ["--flash-attn", "on", "--threads", "6"], ()),
    ({"num-ctx": "8192", "num-parallel": "4", "keep-alive": "5m"}, "ollama",
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "4", "--cache-ram", "256"],
     ("engineArgs.keep-alive",)),
    ({"n-predict": "64"}, "llamacpp", ["--n-predict", "64"], ()),
    ({"kv-cache-type": "q8_0"}, "ollama", ["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
     ()),
])
def test_engine_args_are_llama_servers_flags(
        engine_args: dict[str, str], engine: str, flags: list[str],
        ignored: tuple[str, ...]) -> None:
    decision = decide(gemma(engineArgs=engine_args or None, inferenceEngine=engine,
                            llamaCpp=None), LAPTOP, env=())
    assert isinstance(decision, LocalServe)
    args = " ".join(decision.server_args("/m.gguf", 1))
    assert " ".join(flags) in args
    assert decision.ignored == ignored


@pytest.mark.parametrize(("cpus", "millicores", "threads"), [
    (8, 2000, "2"), (8, 2500, "2"), (2, 16000, "2"), (4, 100, "1"),
])
def test_threads_follow_the_cpu_request_capped_by_the_machine(cpus: int, millicores: int,
                                                               threads: str) -> None:
    model = gemma(resources={"acceleratorCount": 0, "cpuMillicores": millicores,
                             "memoryGiB": 2})
    decision = decide(model, Machine(cpus=cpus, memory_gib=16), env=())
    assert isinstance(decision, LocalServe)
    args = decision.server_args("/m.gguf", 1)
    assert args[args.index("--threads") + 1] == threads


@pytest.mark.parametrize(("doc", "machine", "reason"), [
    (sample_doc("gemma4-31b-nvidia"), LAPTOP,
     "needs 1 NVIDIA GPU(s) and this machine has none: serve it in a cluster"),
    (sample_doc("gemma4-31b-nvidia"), GPU_BOX,
     "`llmop up` runs models on the CPU with llama.cpp only"),
    (sample_doc("qwen35-9b-cpu"), LAPTOP,
     "modelSource.type huggingface is fetched inside a cluster; on one machine use type file"),
    (load_yaml(CLUSTER_VLLM), LAPTOP,
     "inferenceEngine vllm on the CPU runs in a cluster (vLLM's CPU image)"),
])
def test_models_this_machine_cannot_serve_say_why(doc: Any, machine: Machine,
                                                  reason: str) -> None:
    decision = decide(parse_llmmodel(doc), machine, env=())
    assert isinstance(decision, NotServed)
    assert decision.kind == "unplaceable"
    assert reason in decision.reason


def test_a_model_bigger_than_the_machines_memory_is_refused() -> None:
    big = gemma(totalParametersBillions=30, resources={"acceleratorCount": 0,
                                                       "memoryGiB": 64})
    decision = decide(big, LAPTOP, env=())
    assert isinstance(decision, NotServed)
    assert decision.reason.startswith("needs ~")
    assert "this machine has 16.0 GiB" in decision.reason


def test_the_planner_refuses_what_the_spec_does_not_give_memory_for() -> None:
    starved = gemma(totalParametersBillions=8, resources={"acceleratorCount": 0,
                                                          "memoryGiB": 1})
    decision = decide(starved, Machine(cpus=8, memory_gib=64), env=())
    assert isinstance(decision, NotServed)
    assert "resources.memoryGiB is 1" in decision.reason


def test_remote_models_are_proxied_only_when_their_key_is_in_the_environment() -> None:
    model = parse_llmmodel(local_doc("gpt55-remote"))
    skipped = decide(model, LAPTOP, env={"HOME"})
    assert isinstance(skipped, NotServed)
    assert (skipped.kind, skipped.reason) == (
        "skipped", "set OPENAI_API_KEY to proxy it through the gateway")
    proxied = decide(model, LAPTOP, env={"OPENAI_API_KEY"})
    assert isinstance(proxied, RemoteProxy)
    assert proxied.route()["upstream"] == {"baseUrl": "https://api.openai.com/v1",
                                           "model": "gpt-5.5",
                                           "apiKey": {"env": "OPENAI_API_KEY"}}
    assert proxied.route()["rateLimit"] == {"requestsPerMinute": 500}  # one gateway


@pytest.mark.parametrize(("secret", "variable"), [
    ("openai-api-key", "OPENAI_API_KEY"), ("anthropic-api-key", "ANTHROPIC_API_KEY"),
    ("google.api.key", "GOOGLE_API_KEY"),
])
def test_key_variable_is_the_secret_name_in_capitals(secret: str, variable: str) -> None:
    assert key_env(secret) == variable


def test_clashing_names_and_model_ids_leave_the_later_model_out() -> None:
    first = gemma()
    same_id = copy.deepcopy(local_doc("gemma3-270m"))
    same_id["metadata"]["name"] = "gemma-copy"
    same_name = copy.deepcopy(local_doc("gemma3-270m"))
    same_name["spec"]["modelId"] = "other"
    result = arrange([first, parse_llmmodel(same_id), parse_llmmodel(same_name)], LAPTOP, ())
    assert [type(d).__name__ for d in result.decisions] == ["LocalServe", "NotServed",
                                                           "NotServed"]
    reasons = [d.reason for d in result.decisions if isinstance(d, NotServed)]
    assert reasons == ["modelId gemma-3-270m is already served by gemma3-270m; give this "
                       "model another modelId",
                       "metadata.name gemma3-270m is already used by another model; names "
                       "must be unique"]
    assert [d.model.name for d in result.served] == ["gemma3-270m"]


@pytest.mark.parametrize(("judge", "served"), [
    ("gemma-3-270m-judge", True),  # the judge's modelId, served beside it
    ("ai-models/gemma3-270m-judge", True),  # its namespace/name
    ("llama-guard-3", False),  # nothing in the files given
])
def test_a_guard_whose_judge_is_not_among_the_models_is_not_served(judge: str,
                                                                   served: bool) -> None:
    guarded = gemma(guardrails={"input": [{"name": "safety", "judge": {
        "model": judge, "family": "llama-guard-3"}}]})
    other = copy.deepcopy(local_doc("gemma3-270m"))
    other["metadata"]["name"], other["spec"]["modelId"] = "gemma3-270m-judge", \
        "gemma-3-270m-judge"
    result = arrange([guarded, parse_llmmodel(other)], LAPTOP, ())
    decision = result.decisions[0]
    assert isinstance(decision, LocalServe) == served
    if not served:
        assert isinstance(decision, NotServed) and decision.kind == "unplaceable"
        assert decision.reason == (
            "spec.guardrails.input[0].judge.model: guard safety: no LLMModel in the files "
            "given is 'llama-guard-3' (a guard's judge model is named by its modelId or "
            "namespace/name): declare that model too, or fix the name")


# Gemma 3 270M's header, and a 70B-shaped file claiming to be the same model
GEMMA_FILE = ModelFileStatus(file="gemma.gguf", size_bytes=253_113_024, layers=18,
                             embedding_length=640, head_count=4, head_count_kv=1,
                             key_length=256, value_length=256)
BIG_FILE = ModelFileStatus(file="big.gguf", size_bytes=42_500_000_000, layers=80,
                           embedding_length=8192, head_count=64, head_count_kv=8)


@pytest.mark.parametrize(("file", "memory_gib", "words"), [
    (GEMMA_FILE, 16.0, None),
    # the example's 8 slots of 4096 tokens
    (GEMMA_FILE, 0.5, "gemma.gguf needs ~1.3 GiB of RAM at 32768 tokens of context"),
    (BIG_FILE, 16.0, "big.gguf needs ~50.9 GiB of RAM at 32768 tokens of context (from its "
     "header: 80 layers, 39.6 GiB of weights) and this machine has 16.0 GiB"),
    (BIG_FILE.model_copy(update={"head_count": None}), 16.0, None),  # header too thin: no say
])
def test_the_file_itself_must_fit_the_machine(file: ModelFileStatus, memory_gib: float,
                                              words: str | None) -> None:
    model = parse_llmmodel(local_doc("gemma3-270m"))
    reason = file_does_not_fit(model, file, Machine(cpus=8, memory_gib=memory_gib))
    assert (reason is None) is (words is None)
    if words is not None:
        assert reason is not None and reason.startswith(words)


def test_adapters_are_loaded_applied_to_no_request_in_the_order_of_their_ids() -> None:
    decision = decide(gemma(loraAdapters=[
        {"name": "wild", "source": {"type": "file", "path": "wild.gguf"}},
        {"name": "tame", "source": {"type": "file", "path": "tame.gguf"}}]), LAPTOP, env=())
    assert isinstance(decision, LocalServe)
    args = decision.server_args("/m.gguf", 4100, [("wild", "/a/wild.gguf"),
                                                  ("tame", "/a/tame.gguf")])
    assert args[-7:-3] == ["--lora-scaled", "/a/wild.gguf:0", "--lora-scaled",
                           "/a/tame.gguf:0"]  # then the engineArgs


def test_an_adapter_name_another_model_serves_leaves_the_later_model_out() -> None:
    other = copy.deepcopy(local_doc("gemma3-270m"))
    other["metadata"]["name"] = "gemma-copy"
    other["spec"]["modelId"] = "gemma-copy"
    other["spec"]["loraAdapters"] = [{"name": "gemma-3-270m",
                                      "source": {"type": "file", "path": "a.gguf"}}]
    result = arrange([gemma(), parse_llmmodel(other)], LAPTOP, ())
    assert [d.reason for d in result.decisions if isinstance(d, NotServed)] == [
        "LoRA adapter name gemma-3-270m is already served by gemma3-270m; give this model "
        "another LoRA adapter name"]
