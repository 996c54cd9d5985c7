"""Native upstreams through the gateway: the OpenAI SDK in front, Anthropic's and Gemini's APIs
behind (a real HTTP server on loopback answering with the recorded fixtures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from fake_upstream import FakeUpstream, Reply
from gwtools import GatewayFactory, metric

Upstream = tuple[FakeUpstream, str]
FIXTURES = Path(__file__).parent / "fixtures"
ASK: list[Any] = [{"role": "user", "content": "Hello"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}}}}}


def answer(path: str, status: int = 200) -> Reply:
    return Reply(status=status, body=json.loads((FIXTURES / path).read_text()))


def streamed(path: str, piece: int = 50) -> Reply:
    """The recorded stream, sent in pieces that cut through events."""
    data = (FIXTURES / path).read_bytes()
    return Reply(chunks=[data[i:i + piece] for i in range(0, len(data), piece)])


def native(api: str, base_url: str, key_file: Path, **more: Any) -> dict[str, Any]:
    model = {"anthropic": "claude-opus-4-7", "gemini": "gemini-3.1-pro"}[api]
    return {"api": api, "baseUrl": base_url, "model": model,
            "apiKey": {"file": str(key_file)}, **more}


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="unused",
                              max_retries=0)


async def test_a_chat_completion_from_anthropic(gateway: GatewayFactory, upstream: Upstream,
                                                key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(answer("anthropic/message.json"))
    client, gw = await gateway({"upstream": native("anthropic", base_url, key_file)})
    async with sdk(client) as ai:
        reply = await ai.chat.completions.with_raw_response.create(
            model="gpt-5.5", messages=[{"role": "system", "content": "Be brief."}, *ASK],
            seed=3)
    completion = reply.parse()
    assert completion.choices[0].message.content == "Hello! How can I help you today?"
    assert completion.usage is not None and completion.usage.prompt_tokens == 12
    assert reply.headers["x-llmop-dropped-params"] == "seed"
    seen = fake.requests[0]
    assert seen["path"] == "/v1/messages"
    assert (seen["headers"]["x-api-key"], seen["headers"]["anthropic-version"]) == \
        ("sk-first-key", "2023-06-01")
    assert "Authorization" not in seen["headers"]
    assert seen["body"] == {"model": "claude-opus-4-7", "max_tokens": 4096, "system": "Be brief.",
                            "messages": [{"role": "user", "content": [
                                {"type": "text", "text": "Hello"}]}]}
    assert metric(gw, "llmop_gateway_tokens_total", route="gpt-5.5", kind="prompt") == 12
    assert metric(gw, "llmop_gateway_cost_usd_total", route="gpt-5.5") == pytest.approx(
        (12 * 5 + 10 * 30) / 1e6)


async def test_a_streamed_answer_from_anthropic(gateway: GatewayFactory, upstream: Upstream,
                                                key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(streamed("anthropic/stream_tool_use.sse"))
    client, gw = await gateway({"upstream": native("anthropic", base_url, key_file)})
    async with sdk(client) as ai:
        stream = await ai.chat.completions.create(model="gpt-5.5", messages=ASK,
                                                  tools=[WEATHER], stream=True)
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    arguments = "".join(call.function.arguments or "" for c in chunks if c.choices
                        for call in c.choices[0].delta.tool_calls or [] if call.function)
    assert text == "Okay, let's check the weather for Paris."
    assert arguments == '{"location": "Paris, France", "unit": "celsius"}'
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert all(c.usage is None for c in chunks)  # not asked for: kept from the client
    assert fake.requests[0]["body"]["stream"] is True
    assert metric(gw, "llmop_gateway_tokens_total", route="gpt-5.5", kind="completion") == 89


async def test_tool_calls_from_gemini_and_their_results_back(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(answer("gemini/function_call.json"), answer("gemini/text.json"))
    client, _ = await gateway({"upstream": native("gemini", base_url, key_file)})
    async with sdk(client) as ai:
        first = await ai.chat.completions.create(model="gpt-5.5", messages=ASK, tools=[WEATHER])
        calls = first.choices[0].message.tool_calls or []
        assert [c.function.name for c in calls if c.type == "function"] == [
            "get_weather", "get_time"]
        assert first.choices[0].finish_reason == "tool_calls"
        await ai.chat.completions.create(model="gpt-5.5", tools=[WEATHER], messages=[
            *ASK, first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            *[{"role": "tool", "tool_call_id": c.id, "content": '{"ok": true}'}
              for c in calls]])
    seen = fake.requests
    assert seen[0]["path"] == "/v1/models/gemini-3.1-pro:generateContent"
    assert seen[0]["headers"]["x-goog-api-key"] == "sk-first-key"
    replayed = seen[1]["body"]["contents"]
    assert replayed[1]["parts"][0]["thoughtSignature"] == \
        "CiQBcsjafF1Ee5CqHn2HQ8Ho7wlGLPrRvoyM5P3uKxZf4Q"
    assert [p["functionResponse"] for p in replayed[2]["parts"]] == [
        {"name": "get_weather", "response": {"ok": True}},
        {"name": "get_time", "response": {"ok": True}}]


async def test_a_streamed_answer_from_gemini_with_usage(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(streamed("gemini/stream_text.sse"))
    client, _ = await gateway({"upstream": native("gemini", base_url, key_file)})
    async with sdk(client) as ai:
        stream = await ai.chat.completions.create(
            model="gpt-5.5", messages=ASK, stream=True, stream_options={"include_usage": True})
        chunks = [chunk async for chunk in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == \
        "Hello! How can I help you today?"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 22
    assert fake.requests[0]["path"] == "/v1/models/gemini-3.1-pro:streamGenerateContent"
    assert fake.requests[0]["query"] == {"alt": "sse"}


@pytest.mark.parametrize(("api", "status", "path", "error", "message"), [
    ("anthropic", 400, "anthropic/error_invalid_request.json", openai.BadRequestError,
     "anthropic: max_tokens: 200000 > 128000"),
    ("gemini", 400, "gemini/error_invalid_argument.json", openai.BadRequestError,
     "gemini: Invalid JSON payload received"),
])
async def test_provider_errors_reach_the_client_in_openais_shape(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, api: str, status: int,
        path: str, error: type[Exception], message: str) -> None:
    fake, base_url = upstream
    fake.then(answer(path, status))
    client, _ = await gateway({"upstream": native(api, base_url, key_file)})
    async with sdk(client) as ai:
        with pytest.raises(error) as raised:
            await ai.chat.completions.create(model="gpt-5.5", messages=ASK)
    assert message in str(raised.value)


async def test_an_overloaded_anthropic_fails_over_to_gemini(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(answer("anthropic/error_overloaded.json", 529), answer("gemini/text.json"))
    client, _ = await gateway({"upstream": None, "upstreams": [
        native("anthropic", base_url, key_file, name="claude", weight=1000),
        native("gemini", base_url, key_file, name="gemini", weight=0.001)]})
    async with sdk(client) as ai:
        reply = await ai.chat.completions.with_raw_response.create(model="gpt-5.5",
                                                                   messages=ASK)
    assert reply.parse().choices[0].message.content == "Hello! How can I help you today?"
    assert (reply.headers["x-llmop-upstream"], reply.headers["x-llmop-attempts"]) == \
        ("gemini", "2")
    assert [r["path"] for r in fake.requests] == [
        "/v1/messages", "/v1/models/gemini-3.1-pro:generateContent"]


@pytest.mark.parametrize(("call", "message", "param"), [
    ({"n": 2}, "n: a native anthropic upstream returns one choice", "n"),
    ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "messages.0.content.0.type: 'input_audio' parts are not translated",
     "messages.0.content.0.type"),
])
async def test_what_anthropic_cannot_express_is_a_400_naming_the_field(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, call: dict[str, Any],
        message: str, param: str) -> None:
    fake, base_url = upstream
    client, _ = await gateway({"upstream": native("anthropic", base_url, key_file)})
    async with sdk(client) as ai:
        with pytest.raises(openai.BadRequestError) as raised:
            await ai.chat.completions.create(**{"model": "gpt-5.5", "messages": ASK, **call})
    assert message in raised.value.message and raised.value.param == param
    assert raised.value.code == "unsupported_by_upstream" and fake.requests == []


async def test_endpoints_other_than_chat_are_refused_for_a_native_upstream(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    client, _ = await gateway({"upstream": native("gemini", base_url, key_file)})
    async with sdk(client) as ai:
        with pytest.raises(openai.BadRequestError, match="/embeddings: a native gemini "
                           "upstream serves chat completions only"):
            await ai.embeddings.create(model="gpt-5.5", input="hello")
    assert fake.requests == []


async def test_anthropic_clients_reach_a_gemini_model_through_v1_messages(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(streamed("gemini/stream_text.sse"))
    client, _ = await gateway({"upstream": native("gemini", base_url, key_file)})
    async with anthropic.AsyncAnthropic(base_url=str(client.make_url("")).rstrip("/"),
                                        api_key="unused", max_retries=0) as claude, \
            claude.messages.stream(model="gpt-5.5", max_tokens=64, messages=ASK) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "Hello! How can I help you today?"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (9, 22)
    assert fake.requests[0]["body"]["generationConfig"] == {"maxOutputTokens": 64}
