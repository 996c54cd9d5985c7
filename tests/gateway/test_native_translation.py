"""Native upstreams, pure: OpenAI chat requests to Anthropic and Gemini, their answers back.

The providers' own SDK types (anthropic, google-genai) judge the shapes on their side, the
OpenAI SDK's on ours; the answers are the recorded fixtures in fixtures/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from google.genai import types as genai
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import TypeAdapter

from llm_operator.gateway.providers import NATIVE, Untranslatable
from llm_operator.gateway.providers.gemini import SIGNATURE_MARK

FIXTURES = Path(__file__).parent / "fixtures"
NOW = 1_790_000_000
USER = {"role": "user", "content": "Weather in Paris?"}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"], "additionalProperties": False}}}
CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"location": "Paris"}'}}
PNG = "data:image/png;base64,iVBORw0KGgo="
MESSAGES_PARAMS = TypeAdapter(MessageCreateParamsNonStreaming)


def fixture(path: str) -> Any:
    text = (FIXTURES / path).read_text()
    return json.loads(text) if path.endswith(".json") else text.encode()


def sse_payloads(stream: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in stream.splitlines() if line.startswith(b"data:")]


# --- the fixtures are the providers' shapes ------------------------------------------------

@pytest.mark.parametrize("name", ["message.json", "tool_use.json"])
def test_anthropic_answer_fixtures_are_sdk_messages(name: str) -> None:
    assert Message.model_validate(fixture(f"anthropic/{name}")).type == "message"


@pytest.mark.parametrize("name", ["stream_text.sse", "stream_tool_use.sse", "stream_error.sse"])
def test_anthropic_stream_fixtures_are_sdk_events(name: str) -> None:
    events = TypeAdapter(RawMessageStreamEvent)
    for data in sse_payloads(fixture(f"anthropic/{name}")):
        if data["type"] not in {"ping", "error"}:  # not in the SDK's union of raw events
            events.validate_python(data)


@pytest.mark.parametrize("name", ["text.json", "function_call.json", "blocked_prompt.json"])
def test_gemini_answer_fixtures_are_sdk_responses(name: str) -> None:
    genai.GenerateContentResponse.model_validate_json((FIXTURES / "gemini" / name).read_text())


@pytest.mark.parametrize("name", ["stream_text.sse", "stream_function_call.sse"])
def test_gemini_stream_fixtures_are_sdk_responses(name: str) -> None:
    for data in sse_payloads(fixture(f"gemini/{name}")):
        genai.GenerateContentResponse.model_validate_json(json.dumps(data))


# --- requests ------------------------------------------------------------------------------

ANTHROPIC_REQUESTS = [
    ("system prompts, stop, sampling, user",
     {"messages": [{"role": "system", "content": "Be brief."},
                   {"role": "developer", "content": [{"type": "text", "text": "No emoji."}]},
                   USER], "stop": "END", "temperature": 0.2, "top_p": 0.9, "user": "u-1"},
     {"model": "claude-opus-4-7", "max_tokens": 4096, "system": "Be brief.\n\nNo emoji.",
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
      "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["END"],
      "metadata": {"user_id": "u-1"}}),
    ("images inline and by URL; max_completion_tokens wins",
     {"messages": [{"role": "user", "content": [
         {"type": "text", "text": "Compare"}, {"type": "image_url", "image_url": {"url": PNG}},
         {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]}],
      "max_tokens": 50, "max_completion_tokens": 70},
     {"model": "claude-opus-4-7", "max_tokens": 70, "messages": [{"role": "user", "content": [
         {"type": "text", "text": "Compare"},
         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                      "data": "iVBORw0KGgo="}},
         {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}}]}]}),
    ("a tool round trip: calls, results merged into one user turn, tool choice",
     {"messages": [USER, {"role": "assistant", "content": None, "tool_calls": [
         CALL, {**CALL, "id": "call_2"}]},
         {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
         {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "19 C"}]},
         {"role": "user", "content": "And tomorrow?"}],
      "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False},
     {"model": "claude-opus-4-7", "max_tokens": 4096, "messages": [
         {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
         {"role": "assistant", "content": [
             {"type": "tool_use", "id": "call_1", "name": "get_weather",
              "input": {"location": "Paris"}},
             {"type": "tool_use", "id": "call_2", "name": "get_weather",
              "input": {"location": "Paris"}}]},
         {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "call_1", "content": "18 C"},
             {"type": "tool_result", "tool_use_id": "call_2", "content": "19 C"},
             {"type": "text", "text": "And tomorrow?"}]}],
      "tools": [{"name": "get_weather", "description": "Weather in a city",
                 "input_schema": WEATHER["function"]["parameters"]}],  # type: ignore[index]
      "tool_choice": {"type": "any", "disable_parallel_tool_use": True}}),
    ("a named tool", {"messages": [USER], "tools": [WEATHER], "tool_choice": {
        "type": "function", "function": {"name": "get_weather"}}},
     {"model": "claude-opus-4-7", "max_tokens": 4096, "messages": [
         {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
      "tools": [{"name": "get_weather", "description": "Weather in a city",
                 "input_schema": WEATHER["function"]["parameters"]}],  # type: ignore[index]
      "tool_choice": {"type": "tool", "name": "get_weather"}}),
]


@pytest.mark.parametrize(("case", "body", "expected"), ANTHROPIC_REQUESTS,
                         ids=[c[0] for c in ANTHROPIC_REQUESTS])
def test_openai_requests_become_messages_requests(case: str, body: dict[str, Any],
                                                  expected: dict[str, Any]) -> None:
    sent = NATIVE["anthropic"].translate({"model": "opus", **body}, "claude-opus-4-7",
                                         stream=False, max_tokens=4096)
    assert (sent.path, sent.body) == ("/messages", expected)
    MESSAGES_PARAMS.validate_python(sent.body)


GEMINI_REQUESTS = [
    ("system instruction, generation config, JSON schema output",
     {"messages": [{"role": "system", "content": "Be brief."}, USER], "stop": ["END"],
      "temperature": 0.2, "seed": 7, "max_tokens": 100, "presence_penalty": 0.5,
      "response_format": {"type": "json_schema", "json_schema": {
          "name": "w", "schema": {"type": "object", "properties": {"c": {"type": "number"}}}}}},
     {"contents": [{"role": "user", "parts": [{"text": "Weather in Paris?"}]}],
      "systemInstruction": {"parts": [{"text": "Be brief."}]},
      "generationConfig": {"maxOutputTokens": 100, "temperature": 0.2, "seed": 7,
                           "presencePenalty": 0.5, "stopSequences": ["END"],
                           "responseMimeType": "application/json",
                           "responseJsonSchema": {"type": "object", "properties": {
                               "c": {"type": "number"}}}}}),
    ("images inline and by URL",
     {"messages": [{"role": "user", "content": [
         {"type": "image_url", "image_url": {"url": PNG}},
         {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}}]}]},
     {"contents": [{"role": "user", "parts": [
         {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
         {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/a.jpg"}}]}],
      "generationConfig": {"maxOutputTokens": 4096}}),
    ("a tool round trip: results name their function, the signature goes back",
     {"messages": [USER, {"role": "assistant", "content": "Checking.", "tool_calls": [
         {**CALL, "id": f"call_1{SIGNATURE_MARK}c2lnLTE="},
         {**CALL, "id": "call_2", "extra_content": {"google": {"thought_signature": "c2ln"}}}]},
         {"role": "tool", "tool_call_id": f"call_1{SIGNATURE_MARK}c2lnLTE=",
          "content": '{"temperature": 18}'},
         {"role": "tool", "tool_call_id": "call_2", "content": "19 C"}],
      "tools": [WEATHER], "tool_choice": {"type": "function",
                                          "function": {"name": "get_weather"}}},
     {"contents": [
         {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
         {"role": "model", "parts": [
             {"text": "Checking."},
             {"functionCall": {"name": "get_weather", "args": {"location": "Paris"}},
              "thoughtSignature": "c2lnLTE="},
             {"functionCall": {"name": "get_weather", "args": {"location": "Paris"}},
              "thoughtSignature": "c2ln"}]},
         {"role": "user", "parts": [
             {"functionResponse": {"name": "get_weather", "response": {"temperature": 18}}},
             {"functionResponse": {"name": "get_weather", "response": {"content": "19 C"}}}]}],
      "generationConfig": {"maxOutputTokens": 4096},
      "tools": [{"functionDeclarations": [{
          "name": "get_weather", "description": "Weather in a city",
          "parametersJsonSchema": WEATHER["function"]["parameters"]}]}],  # type: ignore[index]
      "toolConfig": {"functionCallingConfig": {"mode": "ANY",
                                               "allowedFunctionNames": ["get_weather"]}}}),
]


@pytest.mark.parametrize(("case", "body", "expected"), GEMINI_REQUESTS,
                         ids=[c[0] for c in GEMINI_REQUESTS])
def test_openai_requests_become_generate_content_requests(case: str, body: dict[str, Any],
                                                          expected: dict[str, Any]) -> None:
    sent = NATIVE["gemini"].translate({"model": "pro", **body}, "gemini-3.1-pro",
                                      stream=False, max_tokens=4096)
    assert (sent.path, sent.body) == ("/models/gemini-3.1-pro:generateContent", expected)
    # google-genai's types forbid unknown fields: a misspelt one fails here
    for item in sent.body["contents"]:
        genai.Content.model_validate_json(json.dumps(item))
    genai.GenerationConfig.model_validate_json(json.dumps(sent.body["generationConfig"]))
    for name, kind in (("systemInstruction", genai.Content), ("toolConfig", genai.ToolConfig)):
        if name in sent.body:
            kind.model_validate_json(json.dumps(sent.body[name]))
    for tool in sent.body.get("tools", []):
        genai.Tool.model_validate_json(json.dumps(tool))


def test_a_stream_goes_to_stream_generate_content_with_sse() -> None:
    sent = NATIVE["gemini"].translate({"messages": [USER]}, "models/gemini-3.1-pro",
                                      stream=True, max_tokens=10)
    assert sent.path == "/models/gemini-3.1-pro:streamGenerateContent?alt=sse"
    assert NATIVE["anthropic"].translate({"messages": [USER]}, "m", stream=True,
                                         max_tokens=10).body["stream"] is True


@pytest.mark.parametrize(("api", "body", "dropped"), [
    ("anthropic", {"seed": 1, "frequency_penalty": 0.1, "logit_bias": {"1": 2}, "store": True,
                   "n": 1, "modalities": ["text"]}, ("frequency_penalty", "logit_bias",
                                                     "seed", "store")),
    ("gemini", {"seed": 1, "user": "u", "parallel_tool_calls": True, "reasoning_effort": "low"},
     ("parallel_tool_calls", "reasoning_effort", "user")),
])
def test_parameters_without_a_counterpart_are_dropped_and_named(
        api: str, body: dict[str, Any], dropped: tuple[str, ...]) -> None:
    sent = NATIVE[api].translate({"messages": [USER], **body}, "m", stream=False, max_tokens=9)
    assert sent.dropped == dropped


@pytest.mark.parametrize(("api", "body", "message"), [
    ("anthropic", {"n": 2}, "n: a native anthropic upstream returns one choice"),
    ("gemini", {"logprobs": True}, "logprobs: token log probabilities are not translated"),
    ("anthropic", {"response_format": {"type": "json_object"}},
     "response_format: JSON output is not translated"),
    ("anthropic", {"functions": [{"name": "f"}]}, "functions: the legacy functions parameter"),
    ("anthropic", {"messages": []}, "messages: give at least one message"),
    ("anthropic", {"messages": [{"role": "system", "content": "x"}]},
     "messages: give at least one user message"),
    ("anthropic", {"messages": [{"role": "critic", "content": "x"}]}, "messages.0.role: must be"),
    ("anthropic", {"max_tokens": 0}, "max_tokens: must be a positive integer"),
    ("anthropic", {"stop": [1]}, "stop: give a string or a list of strings"),
    ("anthropic", {"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]},
     "messages.0.content.0.type: 'input_audio' parts are not translated"),
    ("anthropic", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png,xyz"}}]}]},
     "messages.0.content.0.image_url.url: a data URL must be"),
    ("anthropic", {"messages": [USER, {"role": "assistant", "tool_calls": [
        {**CALL, "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages.1.tool_calls.0.function.arguments: not valid JSON"),
    ("gemini", {"messages": [USER, {"role": "tool", "tool_call_id": "x", "content": "1"}]},
     "messages.1.tool_call_id: no earlier assistant tool call has this id"),
    ("gemini", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/image"}}]}]},
     "the image's type cannot be told from its URL"),
    ("gemini", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema: required"),
    ("gemini", {"tools": [{"type": "web_search"}]}, "tools.0: only function tools"),
    ("gemini", {"tool_choice": "sometimes"}, "tool_choice: auto, required, none"),
])
def test_what_cannot_be_translated_is_refused_by_name(api: str, body: dict[str, Any],
                                                      message: str) -> None:
    with pytest.raises(Untranslatable, match=message.replace("(", r"\(")):
        NATIVE[api].translate({"messages": [USER], **body}, "m", stream=False, max_tokens=9)


# --- answers -------------------------------------------------------------------------------

ANSWERS = [
    ("anthropic", "message.json", "Hello! How can I help you today?", [], "stop",
     (12, 10, 0)),
    ("anthropic", "tool_use.json", "I'll check the weather in Paris.",
     [("toolu_01A09q90qw90lq917835lq9", "get_weather",
       {"location": "Paris, France", "unit": "celsius"})], "tool_calls", (1496, 91, 1024)),
    ("gemini", "text.json", "Hello! How can I help you today?", [], "stop", (9, 28, 0)),
    ("gemini", "function_call.json", None,
     [(f"call_e3xKaPTsJ4q1xN8P2ZyT6Qk_0_0{SIGNATURE_MARK}"
       "CiQBcsjafF1Ee5CqHn2HQ8Ho7wlGLPrRvoyM5P3uKxZf4Q", "get_weather",
       {"location": "Paris, France", "unit": "celsius"}),
      ("call_e3xKaPTsJ4q1xN8P2ZyT6Qk_0_1", "get_time", {"timezone": "Europe/Paris"})],
     "tool_calls", (60, 24, 32)),
    ("gemini", "blocked_prompt.json", None, [], "content_filter", (8, 0, 0)),
]


@pytest.mark.parametrize(("api", "name", "text", "calls", "finish", "tokens"), ANSWERS,
                         ids=[f"{a[0]}/{a[1]}" for a in ANSWERS])
def test_answers_become_chat_completions(api: str, name: str, text: str | None,
                                         calls: list[tuple[str, str, dict[str, Any]]],
                                         finish: str, tokens: tuple[int, int, int]) -> None:
    answer = ChatCompletion.model_validate(NATIVE[api].answer(fixture(f"{api}/{name}"), NOW))
    choice = answer.choices[0]
    assert (choice.message.content, choice.finish_reason) == (text, finish)
    assert [(c.id, c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls or [] if c.type == "function"] == calls
    assert answer.usage is not None and answer.created == NOW
    cached = answer.usage.prompt_tokens_details.cached_tokens \
        if answer.usage.prompt_tokens_details else 0
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens, cached) == tokens


def test_a_gemini_call_replayed_by_a_client_carries_its_signature_back() -> None:
    answer = NATIVE["gemini"].answer(fixture("gemini/function_call.json"), NOW)
    message = answer["choices"][0]["message"]
    replay = {"messages": [USER, message, *[
        {"role": "tool", "tool_call_id": c["id"], "content": "ok"}
        for c in message["tool_calls"]]]}
    sent = NATIVE["gemini"].translate(replay, "gemini-3.1-pro", stream=False, max_tokens=9)
    model_turn = sent.body["contents"][1]["parts"]
    assert [p.get("thoughtSignature") for p in model_turn] == [
        "CiQBcsjafF1Ee5CqHn2HQ8Ho7wlGLPrRvoyM5P3uKxZf4Q", None]
    assert [p["functionResponse"]["name"] for p in sent.body["contents"][2]["parts"]] == [
        "get_weather", "get_time"]


@pytest.mark.parametrize(("api", "status", "name", "message", "kind"), [
    ("anthropic", 400, "error_invalid_request.json", "anthropic: max_tokens: 200000 > 128000",
     "invalid_request_error"),
    ("anthropic", 529, "error_overloaded.json", "anthropic: Overloaded", "overloaded_error"),
    ("gemini", 400, "error_invalid_argument.json", "gemini: Invalid JSON payload received",
     "invalid_request_error"),
    ("gemini", 429, "error_exhausted.json", "gemini: Resource has been exhausted",
     "rate_limit_error"),
])
def test_errors_keep_the_providers_message_in_openais_shape(
        api: str, status: int, name: str, message: str, kind: str) -> None:
    error = NATIVE[api].error(status, fixture(f"{api}/{name}"))["error"]
    assert error["message"].startswith(message) and error["type"] == kind


def test_an_error_that_is_not_json_says_the_status() -> None:
    assert NATIVE["gemini"].error(502, None)["error"]["message"] == "gemini answered HTTP 502"


# --- streams -------------------------------------------------------------------------------

def replay_stream(api: str, stream: bytes, piece: int) -> list[dict[str, Any]]:
    """The OpenAI events for ``stream`` fed ``piece`` bytes at a time."""
    adapter = NATIVE[api].stream(NOW)
    out = b"".join(adapter.feed(stream[i:i + piece]) for i in range(0, len(stream), piece))
    out += adapter.close()
    assert out.endswith(b"data: [DONE]\n\n")
    return [json.loads(line[5:]) for line in out.splitlines()
            if line.startswith(b"data:") and line != b"data: [DONE]"]


def assemble(events: list[dict[str, Any]]) -> tuple[str, dict[int, list[str]], str | None,
                                                    tuple[int, int]]:
    """Text, tool calls (index -> id, name, arguments), finish and usage of OpenAI chunks."""
    text, finish, usage = "", None, (0, 0)
    calls: dict[int, list[str]] = {}
    for event in events:
        chunk = ChatCompletionChunk.model_validate(event)
        if chunk.usage is not None:
            usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                entry = calls.setdefault(call.index, ["", "", ""])
                function = call.function
                entry[0] += call.id or ""
                entry[1] += function.name or "" if function else ""
                entry[2] += function.arguments or "" if function else ""
            finish = choice.finish_reason or finish
    return text, calls, finish, usage


STREAMS = [
    ("anthropic", "stream_text.sse", "Hello! How can I help you today?", {}, "stop", (25, 15)),
    ("anthropic", "stream_tool_use.sse", "Okay, let's check the weather for Paris.",
     {0: ["toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather",
          '{"location": "Paris, France", "unit": "celsius"}']}, "tool_calls", (472, 89)),
    ("gemini", "stream_text.sse", "Hello! How can I help you today?", {}, "stop", (9, 22)),
    ("gemini", "stream_function_call.sse", "",
     {0: [f"call_Vb3KaM2hAoqxN8P0vKT8Qw_0_0{SIGNATURE_MARK}"
          "CiQBcsjafF1Ee5CqHn2HQ8Ho7wlGLPrRvoyM5P3uKxZf4Q", "get_weather",
          '{"location":"Paris, France","unit":"celsius"}']}, "tool_calls", (60, 16)),
]


@pytest.mark.parametrize("piece", [1, 17, 1 << 20], ids=["bytewise", "17B", "whole"])
@pytest.mark.parametrize(("api", "name", "text", "calls", "finish", "usage"), STREAMS,
                         ids=[f"{s[0]}/{s[1]}" for s in STREAMS])
def test_streams_become_chunks_however_the_bytes_arrive(
        api: str, name: str, text: str, calls: dict[int, list[str]], finish: str,
        usage: tuple[int, int], piece: int) -> None:
    events = replay_stream(api, fixture(f"{api}/{name}"), piece)
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert events[-1]["choices"] == []  # the usage chunk comes last, as OpenAI sends it
    assert assemble(events) == (text, calls, finish, usage)


def test_an_error_event_mid_stream_ends_it_with_an_openai_error() -> None:
    events = replay_stream("anthropic", fixture("anthropic/stream_error.sse"), 64)
    assert assemble(events[:-1])[0] == "Once upon"
    assert events[-1] == {"error": {"message": "anthropic: Overloaded",
                                    "type": "overloaded_error", "param": None, "code": None}}


@pytest.mark.parametrize(("api", "name", "cut", "message"), [
    ("anthropic", "stream_text.sse", b"event: message_stop",
     "anthropic: the stream ended before message_stop"),
    ("gemini", "stream_text.sse", b'data: {"candidates": [{"content": {"parts": [{"text": " you',
     "gemini: the stream ended before a finishReason"),
])
def test_a_stream_cut_short_says_so(api: str, name: str, cut: bytes, message: str) -> None:
    stream = fixture(f"{api}/{name}")
    events = replay_stream(api, stream[:stream.index(cut)], 1 << 20)
    assert events[-1]["error"]["message"] == message
