"""A model's guardrails hold for its MCP tool: the call and the answer pass the same guards."""

from __future__ import annotations

import mcp_types as types
import yaml

from mcp import Client

from fake_upstream import Reply, completion
from mcptools import Running

CARD = "4111 1111 1111 1111"
RAILS = {"input": [{"name": "no-ibans", "action": "block", "pii": {"entities": ["IBAN_CODE"]}},
                   {"name": "no-pii", "action": "mask", "pii": {}}],
         "output": [{"name": "no-pii", "action": "mask", "pii": {}}]}


async def guarded(running: Running) -> None:
    """The Gemma sample with guardrails, once the server has read it again."""
    path = running.models / "gemma4-31b-nvidia.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["guardrails"] = RAILS
    path.write_text(yaml.safe_dump(doc))
    catalog = running.service.catalog
    await running.service.until(lambda: (r := catalog.get("gemma4_31b_nvidia")) is not None
                                and r.guardrails is not None)


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
