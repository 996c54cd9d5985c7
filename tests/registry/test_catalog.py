"""The tool catalog: records from models, precedence between sources, thinking switches."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.registry.catalog import (
    AdminPayloadError,
    Catalog,
    ToolRecord,
    endpoint_problem,
    from_admin,
    from_model,
    records_of,
    thinking_style,
)
from llm_operator.registry.tools import ChatArguments, chat_request, chat_result, model_tool

from samples import sample_doc

USER = [{"role": "user", "content": "2+2?"}]


def record(stem: str, source: Any = "kubernetes", phase: str | None = "Ready",
           tool: str | None = None, **meta: Any) -> ToolRecord:
    doc = copy.deepcopy(sample_doc(stem))
    doc["metadata"].update(meta)
    if tool:
        doc["spec"]["mcpExposure"]["toolName"] = tool
    if phase:
        doc["status"] = {"phase": phase, "endpoint": "http://x:8000/v1"}
    found = from_model(parse_llmmodel(doc), source)
    assert found is not None
    return found


@pytest.mark.parametrize(("stem", "style"), [
    ("qwen36-35b-gaudi", "enable_thinking"),
    ("qwen35-9b-cpu", "enable_thinking"),
    ("claude-opus47-remote", "anthropic"),
    ("gpt55-remote", "reasoning_effort"),
    ("gemini31-remote", "reasoning_effort"),
    ("gemma4-31b-nvidia", "system_prompt"),
])
def test_thinking_style_follows_the_family(stem: str, style: str) -> None:
    assert thinking_style(parse_llmmodel(sample_doc(stem))) == style


@pytest.mark.parametrize(("stem", "thinking", "max_tokens", "extra", "system"), [
    ("qwen36-35b-gaudi", True, 512, {"chat_template_kwargs": {"enable_thinking": True}}, None),
    ("qwen36-35b-gaudi", False, 512, {"chat_template_kwargs": {"enable_thinking": False}},
     None),
    ("qwen36-35b-gaudi", None, 512, {}, None),
    ("claude-opus47-remote", True, 4096,
     {"thinking": {"type": "enabled", "budget_tokens": 1024}}, None),
    # Anthropic's budget must stay below max_tokens: fall back to the guide's instruction.
    ("claude-opus47-remote", True, 512, {}, "Think step by step"),
    ("claude-opus47-remote", False, 4096, {}, None),
    ("gemma4-31b-nvidia", True, 512, {}, None),  # no thinking mode: nothing changes
])
def test_chat_request_switches_thinking(stem: str, thinking: bool | None, max_tokens: int,
                                        extra: dict[str, Any], system: str | None) -> None:
    rec = record(stem)
    body, on = chat_request(rec, ChatArguments(USER, 0.5, max_tokens, thinking))
    base = {"model", "messages", "temperature", "max_tokens"}
    assert {k: body[k] for k in set(body) - base} == extra
    assert on is bool(thinking and rec.facets.supports_thinking)
    if system is None:
        assert body["messages"] == USER
    else:
        assert body["messages"][0]["role"] == "system"
        assert body["messages"][0]["content"].startswith(system)
        assert body["messages"][1:] == USER


def test_the_instruction_joins_an_existing_system_prompt() -> None:
    rec = record("claude-opus47-remote")
    messages = [{"role": "system", "content": "Be brief."}, *USER]
    body, _ = chat_request(rec, ChatArguments(messages, 0.5, 100, True))
    assert body["messages"][0]["content"].startswith("Be brief.\n\nThink step by step")
    assert messages[0]["content"] == "Be brief."  # the caller's list is not mutated


def test_chat_result_carries_reasoning_and_usage() -> None:
    text, structured = chat_result(record("qwen36-35b-gaudi"), {
        "model": "Qwen/Qwen3.6-35B-A3B", "usage": {"prompt_tokens": 5, "completion_tokens": 7,
                                                   "total_tokens": 12},
        "choices": [{"finish_reason": "stop", "message": {
            "content": "O(n log n)", "reasoning_content": "split, merge"}}]}, True)
    assert text == "O(n log n)"
    assert structured["reasoning"] == "split, merge"
    assert structured["usage"] == {"promptTokens": 5, "completionTokens": 7, "totalTokens": 12}


def test_remote_tools_are_open_world_and_local_ones_are_not() -> None:
    assert model_tool(record("gpt55-remote"))["annotations"]["openWorldHint"] is True
    assert model_tool(record("qwen35-9b-cpu"))["annotations"]["openWorldHint"] is False


def test_unexposed_models_have_no_tool() -> None:
    doc = sample_doc("qwen35-9b-cpu")
    doc["spec"]["mcpExposure"] = {"enabled": False}
    assert from_model(parse_llmmodel(doc), "files") is None


@pytest.mark.parametrize(("phase", "callable_"), [
    ("Ready", True), ("Proxying", True), ("Starting", False), ("Idle", False), (None, False),
])
def test_only_serving_models_are_callable(phase: str | None, callable_: bool) -> None:
    assert record("qwen35-9b-cpu", phase=phase).callable is callable_


def test_precedence_is_kubernetes_then_files_then_admin() -> None:
    catalog = Catalog()
    admin = from_admin("qwen35_9b_cpu", {"name": "qwen35_9b_cpu", "endpoint": "http://a/v1",
                                         "modelId": "m", "domains": []})
    assert catalog.put(admin)
    assert catalog.put(record("qwen35-9b-cpu", "files"))
    assert catalog.get("qwen35_9b_cpu") is not None
    assert catalog.get("qwen35_9b_cpu").source == "files"  # type: ignore[union-attr]
    assert catalog.put(record("qwen35-9b-cpu", "kubernetes"))
    assert catalog.get("qwen35_9b_cpu").source == "kubernetes"  # type: ignore[union-attr]
    assert [(h.source, w.source) for h, w in catalog.shadowed] == [
        ("files", "kubernetes"), ("admin", "kubernetes")]
    assert catalog.remove("kubernetes", "ai-models/qwen35-9b-cpu")
    assert catalog.get("qwen35_9b_cpu").source == "files"  # type: ignore[union-attr]


def test_a_change_is_reported_only_when_tools_change() -> None:
    catalog = Catalog()
    assert catalog.replace("files", [record("qwen35-9b-cpu", "files")])
    assert not catalog.replace("files", [record("qwen35-9b-cpu", "files")])
    assert not catalog.put(record("gpt55-remote", "files", phase="Pending"))
    assert catalog.put(record("gpt55-remote", "files", phase="Proxying"))
    assert catalog.version == 2
    assert [r.tool_name for r in catalog.tools()] == ["gpt55_frontier", "qwen35_9b_cpu"]


def test_the_same_tool_in_two_namespaces_resolves_deterministically() -> None:
    catalog = Catalog()
    catalog.replace("kubernetes", [record("qwen35-9b-cpu", namespace="team-b"),
                                   record("qwen35-9b-cpu", namespace="team-a")])
    assert catalog.get("qwen35_9b_cpu").key == "team-a/qwen35-9b-cpu"  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "body", "message"), [
    ("a", {"name": "b"}, "must match name in body"),
    ("a b", {"name": "a b", "endpoint": "http://x", "modelId": "m"}, "1-128 characters"),
    ("a", {"name": "a", "endpoint": "http://x", "modelId": "m", "domains": "code"},
     "domains must be a list"),
    ("a", {"name": "a", "endpoint": "http://x", "modelId": "m", "contextWindowK": 0},
     "contextWindowK must be a positive integer"),
])
def test_admin_payload_errors_say_what_to_fix(name: str, body: Any, message: str) -> None:
    with pytest.raises(AdminPayloadError, match=message):
        from_admin(name, body)


@pytest.mark.parametrize(("url", "allowed", "refused"), [
    ("http://vllm.ai-models.svc:8000/v1", (), None),
    ("http://vllm.ai-models.svc.cluster.local:8000/v1", (), None),
    ("http://vllm:8000/v1", (), None),
    ("http://127.0.0.1:8000/v1", (), None),
    ("http://localhost:8000/v1", (), None),
    ("http://[::1]:8000/v1", (), None),
    ("http://169.254.169.254/latest/meta-data", (), "link-local or a cloud metadata"),
    ("http://169.254.169.254/", ("169.254.169.254",), "link-local or a cloud metadata"),
    ("http://metadata.google.internal/", (), "link-local or a cloud metadata"),
    ("http://metadata/computeMetadata/v1", (), "link-local or a cloud metadata"),
    ("http://[fe80::1]/", (), "link-local or a cloud metadata"),
    ("http://0.0.0.0:8000/v1", (), "link-local or a cloud metadata"),
    ("https://api.example.com/v1", (), "outside the cluster"),
    ("http://10.0.0.7:8000/v1", (), "outside the cluster"),
    ("https://api.example.com/v1", ("api.example.com",), None),
    ("https://eu.api.example.com/v1", (".example.com",), None),
    ("ftp://vllm/v1", (), "http(s) URL"),
    ("http:///v1", (), "http(s) URL"),
])
def test_admin_endpoints_stay_inside_the_cluster(url: str, allowed: tuple[str, ...],
                                                 refused: str | None) -> None:
    problem = endpoint_problem(url, allowed)
    assert (problem is None) == (refused is None)
    assert refused is None or refused in str(problem)


def test_each_adapter_is_a_record_of_its_own_and_only_when_the_model_is_exposed() -> None:
    doc = sample_doc("llama32-3b-lora-nvidia")
    records = records_of(parse_llmmodel(doc), "kubernetes")
    assert [(r.tool_name, r.model_id, r.key) for r in records] == [
        ("llama32_3b", "meta-llama/Llama-3.2-3B-Instruct", "ai-models/llama32-3b-lora"),
        ("llama32_3b.text2sql", "text2sql", "ai-models/llama32-3b-lora#lora:text2sql"),
        ("llama32_3b.support-tone", "support-tone",
         "ai-models/llama32-3b-lora#lora:support-tone"),
        ("llama32_3b.legal-summaries", "legal-summaries",
         "ai-models/llama32-3b-lora#lora:legal-summaries")]
    assert all(r.request == {} for r in records)  # vLLM: the adapter's name is the model
    doc["spec"]["loraAdapters"][0]["toolName"] = "sql_writer"
    assert records_of(parse_llmmodel(doc), "files")[1].tool_name == "sql_writer"
    doc["spec"]["mcpExposure"]["enabled"] = False
    assert records_of(parse_llmmodel(doc), "files") == []


def test_an_sglang_adapters_tool_asks_for_the_base_model_with_its_lora_path() -> None:
    doc = sample_doc("llama32-3b-lora-nvidia")
    doc["spec"].update(inferenceEngine="sglang", engineArgs={})
    records = records_of(parse_llmmodel(doc), "kubernetes")
    assert records[0].request == {}
    assert records[1].request == {"model": "meta-llama/Llama-3.2-3B-Instruct",
                                  "lora_path": "text2sql"}
