"""Calls to one model: an explicit number at a time, the rest queue and show it (issue 14.2)."""

from __future__ import annotations

import asyncio

import aiohttp
from mcp.client import Client

from fake_upstream import Reply, completion
from mcptools import Start

MODEL = "Qwen/Qwen3.5-9B-GGUF"
TOOL = {"tool": "qwen35_9b_cpu"}
MERGE_SORT = [{"role": "user", "content": "What is the time complexity of merge sort?"}]


def sample(exposition: str, name: str) -> float:
    line = next(x for x in exposition.splitlines() if x.startswith(name))
    return float(line.rsplit(" ", 1)[1])


async def test_calls_beyond_the_models_slots_queue_and_the_metrics_say_so(start: Start) -> None:
    async with start(max_concurrent_calls=2) as running:
        answer = asyncio.Event()  # the first two calls hold their slots until the test looks
        running.upstream.then(*[Reply(body=completion(MODEL), hold=answer)] * 2)
        registry = running.service.metrics.registry
        async with Client(running.mcp) as client:
            calls = [asyncio.create_task(client.call_tool("qwen35_9b_cpu",
                                                          {"messages": MERGE_SORT}))
                     for _ in range(5)]
            async with asyncio.timeout(10):  # the gauge has no event to wait on
                while registry.get_sample_value("llmop_mcp_tool_calls_queued", TOOL) != 3:
                    await asyncio.sleep(0.01)
            async with aiohttp.ClientSession() as http, \
                    http.get(f"{running.url}/metrics") as resp:
                exposition = await resp.text()
            seen_upstream = len(running.upstream.requests)
            answer.set()
            results = await asyncio.gather(*calls)
    assert sample(exposition, 'llmop_mcp_tool_calls_in_flight{tool="qwen35_9b_cpu"}') == 2
    assert sample(exposition, 'llmop_mcp_tool_calls_queued{tool="qwen35_9b_cpu"}') == 3
    assert seen_upstream == 2  # the model had two calls at a time, no more
    assert not any(r.is_error for r in results)
    assert registry.get_sample_value("llmop_mcp_tool_calls_total",
                                     {**TOOL, "outcome": "ok"}) == 5
    assert registry.get_sample_value("llmop_mcp_tool_call_queue_seconds_count", TOOL) == 5
    assert registry.get_sample_value("llmop_mcp_tokens_total",
                                     {**TOOL, "kind": "completion"}) == 15


async def test_the_metrics_count_sessions_and_bad_calls(start: Start) -> None:
    async with start() as running, Client(running.mcp, mode="legacy") as client:
        result = await client.call_tool("qwen35_9b_cpu", {})
        async with aiohttp.ClientSession() as http, http.get(f"{running.url}/metrics") as resp:
            exposition = await resp.text()
    assert result.is_error
    assert sample(exposition, 'llmop_mcp_tool_calls_total{outcome="invalid_arguments",'
                              'tool="qwen35_9b_cpu"}') == 1
    assert sample(exposition, "llmop_mcp_sessions ") == 1
