"""The MCP server over real HTTP with the official client, in both protocol eras."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import mcp_types as types
import pytest
import yaml
from mcp.shared.exceptions import MCPError

from mcp import Client

from fake_upstream import Reply
from mcptools import Running, Start

ERAS = ["legacy", "auto"]  # auto: server/discover, then 2026-07-28
GUIDE_TOOLS = ["claude_opus47", "gemini31_pro", "gemma4_26b_vision_amd", "gemma4_31b_nvidia",
               "gpt55_frontier", "qwen35_9b_cpu", "qwen36_reasoning_gaudi"]
MERGE_SORT = [{"role": "user", "content": "What is the time complexity of merge sort and why?"}]


@pytest.mark.parametrize("era", ERAS)
async def test_tools_list_is_the_meta_tool_then_every_model_by_name(running: Running,
                                                                   era: str) -> None:
    async with Client(running.mcp, mode=era) as client:
        assert client.protocol_version == ("2025-11-25" if era == "legacy" else "2026-07-28")
        tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == ["list_available_models", *GUIDE_TOOLS]
    by_name = {t.name: t for t in tools}
    gpt = by_name["gpt55_frontier"]
    assert gpt.annotations is not None and gpt.annotations.open_world_hint is True
    assert gpt.annotations.read_only_hint is True
    qwen = by_name["qwen36_reasoning_gaudi"]
    assert qwen.annotations is not None and qwen.annotations.open_world_hint is False
    assert qwen.description is not None and qwen.description.startswith("Qwen3.6-35B-A3B MoE")
    assert qwen.input_schema["required"] == ["messages"]
    assert by_name["list_available_models"].output_schema is not None
    offers_thinking = {t.name for t in tools[1:] if "thinking" in t.input_schema["properties"]}
    assert offers_thinking == {"claude_opus47", "qwen35_9b_cpu", "qwen36_reasoning_gaudi"}


@pytest.mark.parametrize("era", ERAS)
async def test_server_declares_list_changed(running: Running, era: str) -> None:
    async with Client(running.mcp, mode=era) as client:
        tools = client.server_capabilities.tools
    assert tools is not None and tools.list_changed is True


@pytest.mark.parametrize(("arguments", "expected"), [
    ({}, GUIDE_TOOLS),
    ({"domain": "reasoning", "min_context_k": 257},
     ["claude_opus47", "gemini31_pro", "gpt55_frontier"]),
    ({"domain": "vision", "mode": "local"}, ["gemma4_26b_vision_amd", "gemma4_31b_nvidia"]),
    ({"vendor": "amd"}, ["gemma4_26b_vision_amd"]),
    ({"mode": "remote"}, ["claude_opus47", "gemini31_pro", "gpt55_frontier"]),
    ({"thinking": True}, ["claude_opus47", "qwen35_9b_cpu", "qwen36_reasoning_gaudi"]),
    ({"domain": "no-such-domain"}, []),
], ids=["all", "reasoning-over-256k", "local-vision", "amd", "remote", "thinking", "none"])
@pytest.mark.parametrize("era", ERAS)
async def test_list_available_models_filters(running: Running, era: str,
                                             arguments: dict[str, Any],
                                             expected: list[str]) -> None:
    async with Client(running.mcp, mode=era) as client:
        result = await client.call_tool("list_available_models", arguments)
    assert not result.is_error
    structured = result.structured_content
    assert structured is not None
    assert [m["toolName"] for m in structured["models"]] == expected
    assert structured["count"] == len(expected)
    text = result.content[0]
    assert isinstance(text, types.TextContent) and json.loads(text.text) == structured
    for model in structured["models"]:
        assert set(model) >= {"toolName", "modelId", "domains", "contextWindowK",
                              "supportsThinking", "status", "vendor", "mode"}


@pytest.mark.parametrize("era", ERAS)
async def test_model_tool_calls_the_endpoint_with_the_model_id(running: Running,
                                                                era: str) -> None:
    async with Client(running.mcp, mode=era) as client:
        result = await client.call_tool("gemma4_31b_nvidia", {
            "messages": [{"role": "user", "content": "hi"}], "temperature": 0.2,
            "max_tokens": 64})
    assert not result.is_error
    sent = running.upstream.requests[-1]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"] == {"model": "google/gemma-4-31b-it", "temperature": 0.2,
                            "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    assert isinstance(result.content[0], types.TextContent)
    assert result.content[0].text == "Hello!"
    assert result.structured_content is not None
    assert result.structured_content["usage"] == {"promptTokens": 11, "completionTokens": 3,
                                                  "totalTokens": 14}
    assert result.structured_content["thinking"] is False


@pytest.mark.parametrize(("tool", "extra"), [
    ("qwen36_reasoning_gaudi", {"chat_template_kwargs": {"enable_thinking": True}}),
    ("claude_opus47", {"thinking": {"type": "enabled", "budget_tokens": 1024}}),
])
async def test_thinking_is_switched_on_the_family_way(running: Running, tool: str,
                                                       extra: dict[str, Any]) -> None:
    async with Client(running.mcp) as client:
        result = await client.call_tool(tool, {"messages": MERGE_SORT, "thinking": True,
                                               "max_tokens": 4096})
    assert result.structured_content is not None and result.structured_content["thinking"]
    body = running.upstream.requests[-1]["body"]
    assert {k: body[k] for k in extra} == extra
    assert body["messages"] == MERGE_SORT  # no prompt surgery when the family has a switch


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(("tool", "arguments", "message"), [
    ("qwen35_9b_cpu", {}, "messages must be a non-empty list"),
    ("qwen35_9b_cpu", {"messages": MERGE_SORT, "temperature": 3}, "temperature must be between"),
    ("qwen35_9b_cpu", {"messages": MERGE_SORT, "max_tokens": 0}, "max_tokens must be greater"),
    ("qwen35_9b_cpu", {"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role"),
    ("qwen35_9b_cpu", {"messages": MERGE_SORT, "stream": True}, "unknown argument(s) stream"),
    ("gemma4_31b_nvidia", {"messages": MERGE_SORT, "thinking": True},
     "thinking: this model has no thinking mode (supportsThinking is false)"),
    ("list_available_models", {"vendor": "tpu"}, "vendor must be one of"),
])
async def test_bad_arguments_are_tool_errors_the_model_can_correct(
        running: Running, era: str, tool: str, arguments: dict[str, Any], message: str) -> None:
    """SEP-1303 (2025-11-25): input validation errors are tool results with isError."""
    async with Client(running.mcp, mode=era) as client:
        result = await client.call_tool(tool, arguments)
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert message in result.content[0].text
    assert running.upstream.requests == []


@pytest.mark.parametrize("era", ERAS)
async def test_an_unknown_tool_is_a_protocol_error(running: Running, era: str) -> None:
    async with Client(running.mcp, mode=era) as client:
        with pytest.raises(MCPError) as caught:
            await client.call_tool("no_such_tool", {"messages": MERGE_SORT})
    assert caught.value.code == types.INVALID_PARAMS
    assert "Unknown tool: no_such_tool" in caught.value.message


LEAKY = {"error": {"message": "auth failed for api_key=sk-live-0123456789abcdef\n"
                            "Traceback (most recent call last):\n  File \"/srv/app/main.py\""}}


@pytest.mark.parametrize(("reply", "message"), [
    (Reply(status=503, body={"error": {"message": "model is loading", "type": "x"}}),
     "answered HTTP 503: the model is unavailable (loading, scaling up or overloaded); "
     "try again shortly"),
    (Reply(status=500, body=LEAKY), "answered HTTP 500: the model's server failed"),
    (Reply(status=401, body=LEAKY), "answered HTTP 401: the model's server refused the "
     "gateway's credentials"),
    (Reply(status=200, body={"unexpected": True}), "not a chat completion"),
])
async def test_upstream_failures_are_tool_errors_that_leak_nothing(
        running: Running, reply: Reply, message: str,
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 14.5: a test upstream's key and traceback reached the agent verbatim."""
    running.upstream.then(reply)
    async with Client(running.mcp) as client:
        result = await client.call_tool("qwen35_9b_cpu", {"messages": MERGE_SORT})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    text = result.content[0].text
    assert message in text
    for leaked in ("sk-live", "Traceback", "/srv/app", "model is loading"):
        assert leaked not in text
    assert "sk-live-0123456789abcdef" not in caplog.text  # the log has the detail, redacted
    if reply.body is LEAKY:
        assert "api_key=[REDACTED] Traceback (most recent call last)" in caplog.text


async def test_unreachable_model_is_a_tool_error(start: Start) -> None:
    async with start() as running:
        statuses = yaml.safe_load(running.status_file.read_text())
        statuses["qwen35-9b-cpu"]["endpoint"] = "http://127.0.0.1:9/v1"  # discard port
        changed = running.service.catalog.version
        running.status_file.write_text(yaml.safe_dump(statuses))
        await running.service.until(lambda: running.service.catalog.version > changed)
        async with Client(running.mcp) as client:
            result = await client.call_tool("qwen35_9b_cpu", {"messages": MERGE_SORT})
    assert result.is_error
    assert isinstance(result.content[0], types.TextContent)
    assert "could not reach model Qwen/Qwen3.5-9B-GGUF" in result.content[0].text
    assert "127.0.0.1:9" not in result.content[0].text


async def test_a_model_that_is_not_serving_explains_itself(start: Start) -> None:
    async with start() as running:
        statuses = yaml.safe_load(running.status_file.read_text())
        statuses["qwen35-9b-cpu"] = {"phase": "Downloading"}
        changed = running.service.catalog.version
        running.status_file.write_text(yaml.safe_dump(statuses))
        await running.service.until(lambda: running.service.catalog.version > changed)
        async with Client(running.mcp) as client:
            names = [t.name for t in (await client.list_tools()).tools]
            with pytest.raises(MCPError) as caught:
                await client.call_tool("qwen35_9b_cpu", {"messages": MERGE_SORT})
    assert "qwen35_9b_cpu" not in names
    assert "model Qwen/Qwen3.5-9B-GGUF is Downloading" in caught.value.message
    assert str(running.models) not in caught.value.message  # no server file path


@pytest.mark.parametrize("page_size", [1, 3, 100])
async def test_pages_cover_every_tool_once_in_order(start: Start, page_size: int) -> None:
    async with start(page_size=page_size) as running, Client(running.mcp) as client:
        names: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await client.list_tools(cursor=cursor)
            assert len(page.tools) <= page_size
            names += [t.name for t in page.tools]
            pages += 1
            cursor = page.next_cursor
            if cursor is None:
                break
        refused = []
        for garbage in ("not base64!", "Z2FyYmFnZQ==", "", base64.urlsafe_b64encode(
                b"after:zzz").decode() + "=="):
            with pytest.raises(MCPError) as caught:
                await client.list_tools(cursor=garbage)
            refused.append(caught.value.code)
    assert names == ["list_available_models", *GUIDE_TOOLS]
    assert pages == -(-8 // page_size)
    assert refused == [types.INVALID_PARAMS] * 4


async def test_health_reports_the_model_count(running: Running) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{running.url}/health") as r:
            health = await r.json()
        async with http.get(f"{running.url}/ready") as r:
            ready = r.status
    assert health["status"] == "ok" and health["models"] == 7
    assert ready == 200
