"""Anthropic Messages <-> OpenAI chat: the translation alone, field by field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_operator.gateway.providers.messages_api import (
    MessagesError,
    StreamTranslator,
    from_openai,
    to_openai,
)

BASE = {"model": "qwen", "max_tokens": 64}


@pytest.mark.parametrize(("request_", "expected"), [
    ({**BASE, "messages": [{"role": "user", "content": "Hi"}]},
     {"model": "qwen", "max_tokens": 64, "messages": [{"role": "user", "content": "Hi"}]}),
    ({**BASE, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}],
      "temperature": 0.2, "top_p": 0.9, "stop_sequences": ["\n\n"]},
     {"model": "qwen", "max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": ["\n\n"],
      "messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Hi"}]}),
    ({**BASE, "system": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]},
     {"model": "qwen", "max_tokens": 64, "messages": [
         {"role": "system", "content": "AB"}, {"role": "user", "content": "Hi"}]}),
    ({**BASE, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBOR"}}]}]},
     {"model": "qwen", "max_tokens": 64, "messages": [{"role": "user", "content": [
         {"type": "text", "text": "What is this?"},
         {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}]}]}),
    ({**BASE, "stream": True, "messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"name": "weather", "description": "Weather in a city",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}],
      "tool_choice": {"type": "tool", "name": "weather"}},
     {"model": "qwen", "max_tokens": 64, "stream": True,
      "stream_options": {"include_usage": True},
      "messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {
          "name": "weather", "description": "Weather in a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}],
      "tool_choice": {"type": "function", "function": {"name": "weather"}}}),
    ({**BASE, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather",
             "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18 C, sunny"}]}]},
     {"model": "qwen", "max_tokens": 64, "messages": [
         {"role": "user", "content": "Weather in Paris?"},
         {"role": "assistant", "content": "Checking.", "tool_calls": [
             {"id": "toolu_1", "type": "function",
              "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}]},
         {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C, sunny"}]}),
])
def test_requests_become_openai_chat(request_: dict[str, Any],
                                     expected: dict[str, Any]) -> None:
    assert to_openai(request_) == expected


@pytest.mark.parametrize(("request_", "message"), [
    ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model: required"),
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]},
     "max_tokens: required, a positive integer"),
    ({**BASE, "messages": []}, "messages: give at least one message"),
    ({**BASE, "messages": [{"role": "system", "content": "x"}]},
     "messages.0.role: must be user or assistant"),
    ({**BASE, "messages": [{"role": "user", "content": [{"type": "document"}]}]},
     "messages.0.content.0.type: 'document' is not supported in a user message"),
    ({**BASE, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "x"}},
     "tool_choice.type: must be auto, any, tool or none"),
])
def test_untranslatable_requests_name_the_field(request_: dict[str, Any],
                                                message: str) -> None:
    with pytest.raises(MessagesError, match=message):
        to_openai(request_)


def test_answers_become_anthropic_messages() -> None:
    answer = {"id": "chatcmpl-1", "choices": [{"index": 0, "finish_reason": "tool_calls",
                                               "message": {"role": "assistant",
                                                           "content": "Let me check.",
                                                           "tool_calls": [{
        "id": "call_1", "type": "function",
        "function": {"name": "weather", "arguments": '{"city":"Paris"}'}}]}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7}}
    message = from_openai(answer, "qwen")
    assert message["id"].startswith("msg_") and message["type"] == "message"
    assert {k: message[k] for k in ("role", "model", "stop_reason", "stop_sequence",
                                    "usage", "content")} == {
        "role": "assistant", "model": "qwen", "stop_reason": "tool_use",
        "stop_sequence": None, "usage": {"input_tokens": 12, "output_tokens": 7},
        "content": [{"type": "text", "text": "Let me check."},
                    {"type": "tool_use", "id": "call_1", "name": "weather",
                     "input": {"city": "Paris"}}]}


@pytest.mark.parametrize(("finish", "stop"), [
    ("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "refusal"),
])
def test_finish_reasons_map(finish: str, stop: str) -> None:
    answer = {"choices": [{"finish_reason": finish, "message": {"content": "x"}}]}
    assert from_openai(answer, "m")["stop_reason"] == stop


def events(raw: list[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for item in raw:
        name, data = item.decode().strip().split("\n")
        out.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


def test_a_stream_becomes_anthropic_events_in_order() -> None:
    t = StreamTranslator("qwen")
    raw = t.chunk({"choices": [{"delta": {"role": "assistant", "content": "Hel"}}]})
    raw += t.chunk({"choices": [{"delta": {"content": "lo"}}]})
    raw += t.chunk({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "id": "call_1", "function": {"name": "weather", "arguments": '{"ci'}}]}}]})
    raw += t.chunk({"choices": [{"delta": {"tool_calls": [
        {"index": 0, "function": {"arguments": 'ty":"Paris"}'}}]}, "finish_reason": "tool_calls"}]})
    raw += t.chunk({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}})
    raw += t.finish()
    got = events(raw)
    assert [name for name, _ in got] == [
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert got[2][1]["content_block"] == {"type": "text", "text": ""}
    assert [d["delta"]["text"] for n, d in got[3:5]] == ["Hel", "lo"]
    assert got[6][1] == {"type": "content_block_start", "index": 1, "content_block": {
        "type": "tool_use", "id": "call_1", "name": "weather", "input": {}}}
    assert "".join(d["delta"]["partial_json"] for _, d in got[7:9]) == '{"city":"Paris"}'
    assert got[10][1]["delta"]["stop_reason"] == "tool_use"
    assert got[10][1]["usage"] == {"output_tokens": 9, "input_tokens": 5}
