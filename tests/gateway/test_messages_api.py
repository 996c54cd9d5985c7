"""/v1/messages: Anthropic's own SDK against any model behind the gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import pytest
import yaml

from llm_operator.access.keyring import digest

from fake_upstream import FakeUpstream, Reply, completion, sse_chunks
from gwtools import GatewayFactory, metric

Upstream = tuple[FakeUpstream, str]
HELLO = [{"role": "user", "content": "Say hello"}]


def sdk(client: Any, key: str = "unused") -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=str(client.make_url("")).rstrip("/"),
                                    api_key=key, max_retries=0)


async def test_a_plain_message(gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway()
    async with sdk(client) as claude:
        message = await claude.messages.create(model="gpt-5.5", max_tokens=64,
                                               system="Be brief.", messages=HELLO)
    assert message.type == "message" and message.role == "assistant"
    assert [b.text for b in message.content if b.type == "text"] == ["Hello!"]
    assert (message.stop_reason, message.usage.input_tokens, message.usage.output_tokens) == \
        ("end_turn", 11, 3)
    seen = fake.requests[0]
    assert seen["path"] == "/v1/chat/completions"
    assert seen["body"]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert seen["body"]["model"] == "gpt-5.5-2026-04-23" and seen["body"]["max_tokens"] == 64
    assert metric(gw, "llmop_gateway_tokens_total", route="gpt-5.5", kind="prompt") == 11


async def test_a_streamed_message(gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Hel", "lo", "!"], usage=(7, 4))))
    client, gw = await gateway()
    async with sdk(client) as claude, claude.messages.stream(
            model="gpt-5.5", max_tokens=64, messages=HELLO) as stream:
        pieces = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert pieces == ["Hel", "lo", "!"]
    assert final.usage.output_tokens == 4 and final.stop_reason == "end_turn"
    assert fake.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert metric(gw, "llmop_gateway_tokens_total", route="gpt-5.5", kind="completion") == 4


async def test_tool_use_round_trip(gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    answer = completion("gpt-5.5", text="")
    answer["choices"][0].update(finish_reason="tool_calls", message={
        "role": "assistant", "content": None, "tool_calls": [{
            "id": "call_7", "type": "function",
            "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]})
    fake.then(Reply(body=answer))
    client, _ = await gateway()
    tools = [{"name": "weather", "description": "Weather in a city",
              "input_schema": {"type": "object",
                               "properties": {"city": {"type": "string"}}}}]
    async with sdk(client) as claude:
        first = await claude.messages.create(model="gpt-5.5", max_tokens=64, tools=tools,
                                             messages=HELLO)
        call = next(b for b in first.content if b.type == "tool_use")
        assert (call.name, call.input, first.stop_reason) == \
            ("weather", {"city": "Paris"}, "tool_use")
        await claude.messages.create(model="gpt-5.5", max_tokens=64, tools=tools, messages=[
            *HELLO, {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": "18 C"}]}])
    sent = fake.requests[1]["body"]["messages"]
    assert sent[-1] == {"role": "tool", "tool_call_id": "call_7", "content": "18 C"}
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "weather"


async def test_errors_come_in_anthropics_shape(gateway: GatewayFactory,
                                               tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"id": "claude-code",
                                              "sha256": digest("sk-llmop-cc")}]}))
    client, _ = await gateway(config={"clientKeys": {"file": str(keys)}})
    async with sdk(client, "sk-llmop-wrong") as claude:
        with pytest.raises(anthropic.AuthenticationError, match="not valid"):
            await claude.messages.create(model="gpt-5.5", max_tokens=8, messages=HELLO)
    async with sdk(client, "sk-llmop-cc") as claude:  # the SDK sends x-api-key
        with pytest.raises(anthropic.NotFoundError, match="available models: frontier"):
            await claude.messages.create(model="nope", max_tokens=8, messages=HELLO)
        ok = await claude.messages.create(model="frontier", max_tokens=8, messages=HELLO)
        assert ok.content[0].type == "text"
    async with aiohttp.ClientSession() as http, http.post(
            client.make_url("/v1/messages"), headers={"x-api-key": "sk-llmop-cc"},
            json={"model": "gpt-5.5", "messages": HELLO}) as r:
        assert r.status == 400
        assert await r.json() == {"type": "error", "error": {
            "type": "invalid_request_error",
            "message": "max_tokens: required, a positive integer"}}
