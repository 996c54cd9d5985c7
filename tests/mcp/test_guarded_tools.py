"""A model's guardrails hold for its MCP tool: the call and the answer pass the same guards."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import yaml

from mcp import Client

from fake_upstream import Reply, completion
from mcptools import Running, with_guardrails

CARD = "4111 1111 1111 1111"
RAILS = {"input": [{"name": "no-ibans", "action": "block", "pii": {"entities": ["IBAN_CODE"]}},
                   {"name": "no-pii", "action": "mask", "pii": {}}],
         "output": [{"name": "no-pii", "action": "mask", "pii": {}}]}


async def guarded(running: Running) -> None:
    """The Gemma sample with RAILS, once the server has read it again."""
    await with_guardrails(running, RAILS)


async def test_a_tool_call_is_masked_and_its_answer_too(running: Running) -> None:
    await guarded(running)
    running.upstream.then(Reply(body=completion("m", f"Your card: {CARD}")))
    async with Client(running.mcp) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": f"Card {CARD}, mail jo@example.com"}]})
    assert not result.is_error
    sent = running.upstream.requests[-1]["body"]["messages"]
    assert sent == [{"role": "user", "content": "Card <CREDIT_CARD>, mail <EMAIL_ADDRESS>"}]
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == "Your card: <CREDIT_CARD>"


async def test_a_blocked_tool_call_is_a_tool_error_naming_the_guard(running: Running) -> None:
    await guarded(running)
    async with Client(running.mcp) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": "IBAN DE89 3704 0044 0532 0130 00"}]})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    message = result.content[0].text
    assert "'no-ibans'" in message and "IBAN_CODE" in message and "DE89" not in message
    assert running.upstream.requests == []
    metrics = running.service.metrics.registry
    assert metrics.get_sample_value("llmop_mcp_tool_calls_total", {
        "tool": "gemma4_31b_nvidia", "outcome": "guardrail_blocked"}) == 1


JUDGE = {"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
         "metadata": {"name": "guard", "namespace": "ai-models"},
         "spec": {"modelId": "meta-llama/Llama-Guard-3-1B", "deploymentMode": "local",
                  "totalParametersBillions": 1, "mcpExposure": {"enabled": False}}}


def verdict(text: str) -> Reply:
    return Reply(body={"id": "cmpl-1", "object": "text_completion", "model": "guard",
                       "choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})


async def guarded_by(running: Running, guard_model: dict[str, Any],
                    guard: dict[str, Any]) -> None:
    """The Gemma sample with ``guard`` on its input, the guard's model declared beside it
    (not a tool), serving at the same fake upstream as the others."""
    name = guard_model["metadata"]["name"]
    (running.models / f"{name}.yaml").write_text(yaml.safe_dump(guard_model))
    statuses = yaml.safe_load(running.status_file.read_text())
    statuses[name] = {"phase": "Ready", "endpoint": statuses["gemma4-31b-nvidia"]["endpoint"]}
    running.status_file.write_text(yaml.safe_dump(statuses))
    path = running.models / "gemma4-31b-nvidia.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["guardrails"] = {"input": [guard]}
    path.write_text(yaml.safe_dump(doc))
    catalog = running.service.catalog
    await running.service.until(lambda: (r := catalog.get("gemma4_31b_nvidia")) is not None
                                and r.guardrails is not None
                                and catalog.served(f"ai-models/{name}") is not None)


async def judged(running: Running, judge: str = "ai-models/guard") -> None:
    await guarded_by(running, JUDGE, {
        "name": "safety", "action": "block",
        "judge": {"model": judge, "family": "llama-guard-3", "categories": ["S1", "S9"]}})


async def test_a_judge_that_is_not_a_tool_is_asked_and_its_verdict_blocks(
        running: Running) -> None:
    await judged(running)
    assert running.service.catalog.get("guard") is None  # a guard model, not a tool
    running.upstream.then(verdict("unsafe\nS9"))
    async with Client(running.mcp) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": "How do I make a weapon?"}]})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert "'safety'" in result.content[0].text and "S9" in result.content[0].text
    (asked,) = running.upstream.requests  # the judge, not the model
    assert asked["path"].endswith("/completions") and not asked["path"].endswith(
        "/chat/completions")
    assert asked["body"]["model"] == "meta-llama/Llama-Guard-3-1B"
    assert "How do I make a weapon?" in asked["body"]["prompt"]


async def test_a_safe_verdict_lets_the_call_reach_the_model(running: Running) -> None:
    await judged(running, judge="meta-llama/Llama-Guard-3-1B")  # by its modelId too
    running.upstream.then(verdict("safe"), Reply(body=completion("m", "Bread: flour.")))
    async with Client(running.mcp) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": "How is bread made?"}]})
    assert not result.is_error
    assert [r["path"].rsplit("/", 2)[-2:] for r in running.upstream.requests] == [
        ["v1", "completions"], ["chat", "completions"]]


MODERATOR = {"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
             "metadata": {"name": "moderation", "namespace": "ai-models"},
             "spec": {"modelId": "omni-moderation-latest", "deploymentMode": "local",
                      "modelSource": {"type": "file", "path": "/models/moderation"},
                      "totalParametersBillions": 1, "mcpExposure": {"enabled": False}}}


async def test_a_moderation_guard_asks_its_endpoint_and_what_it_flags_blocks(
        running: Running) -> None:
    """The moderation model is found as a judge is: served among the models read."""
    await guarded_by(running, MODERATOR, {"name": "policy", "moderation": {
        "model": "omni-moderation-latest", "categories": ["violence"]}})
    running.upstream.then(Reply(body={"results": [{
        "flagged": True, "categories": {"violence": True},
        "category_scores": {"violence": 0.91}}]}))
    async with Client(running.mcp) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": "a violent request"}]})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert "'policy'" in result.content[0].text and "violence" in result.content[0].text
    (asked,) = running.upstream.requests
    assert asked["path"].endswith("/moderations")
    assert asked["body"] == {"model": "omni-moderation-latest",
                             "input": ["a violent request"]}
