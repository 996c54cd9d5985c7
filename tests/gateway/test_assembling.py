"""A streamed answer assembled into the plain one the client asked for (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.gateway.providers.assembling import StreamError, assemble

USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def chat(delta: dict[str, Any], finish: str | None = None, index: int = 0,
         **extra: Any) -> dict[str, Any]:
    return {"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m",
            "choices": [{"index": index, "delta": delta, "finish_reason": finish}], **extra}


def text(piece: str, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": "t1", "object": "text_completion", "created": 7, "model": "m",
            "choices": [{"index": 0, "text": piece, "finish_reason": finish}], **extra}


@pytest.mark.parametrize(("events", "answer"), [
    ([text(" Par"), text("is", "stop"),
      {"id": "t1", "object": "text_completion", "created": 7, "model": "m", "choices": [],
       "usage": USAGE, "timings": {"predicted_n": 3}}],
     {"id": "t1", "object": "text_completion", "created": 7, "model": "m", "usage": USAGE,
      "timings": {"predicted_n": 3},
      "choices": [{"index": 0, "text": " Paris", "logprobs": None, "finish_reason": "stop"}]}),
    ([chat({"role": "assistant", "content": None}), chat({"reasoning_content": "think"}),
      chat({"content": "Hel"}), chat({"content": "lo"}, "stop", usage=USAGE)],
     {"id": "c1", "object": "chat.completion", "created": 7, "model": "m", "usage": USAGE,
      "choices": [{"index": 0, "logprobs": None, "finish_reason": "stop",
                   "message": {"role": "assistant", "content": "Hello",
                               "reasoning_content": "think"}}]}),
    ([chat({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                            "function": {"name": "get_", "arguments": '{"ci'}}]}),
      chat({"tool_calls": [{"index": 0, "function": {"name": "weather",
                                                     "arguments": 'ty": "Paris"}'}}]}),
      chat({"tool_calls": [{"index": 1, "id": "call_2", "function": {"name": "now"}}]},
           "tool_calls")],
     {"id": "c1", "object": "chat.completion", "created": 7, "model": "m",
      "choices": [{"index": 0, "logprobs": None, "finish_reason": "tool_calls",
                   "message": {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                       {"id": "call_2", "type": "function",
                        "function": {"name": "now", "arguments": ""}}]}}]}),
    ([chat({"content": "a"}, index=1), chat({"content": "b"}, "length", index=0)],
     {"id": "c1", "object": "chat.completion", "created": 7, "model": "m", "choices": [
         {"index": 0, "logprobs": None, "finish_reason": "length",
          "message": {"role": "assistant", "content": "b"}},
         {"index": 1, "logprobs": None, "finish_reason": None,
          "message": {"role": "assistant", "content": "a"}}]}),
], ids=["text completion", "chat with reasoning", "tool calls by index", "two choices"])
def test_a_stream_becomes_the_plain_answer(events: list[dict[str, Any]],
                                           answer: dict[str, Any]) -> None:
    assert assemble(events) == answer


def test_logprobs_are_concatenated() -> None:
    first = chat({"content": "a"})
    first["choices"][0]["logprobs"] = {"content": [{"token": "a", "logprob": -0.1}]}
    second = chat({"content": "b"}, "stop")
    second["choices"][0]["logprobs"] = {"content": [{"token": "b", "logprob": -0.2}]}
    assert assemble([first, second])["choices"][0]["logprobs"] == {
        "content": [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -0.2}]}


def test_an_error_event_is_the_answer() -> None:
    error = {"error": {"code": 400, "message": "the request exceeds the available context "
                       "size", "type": "exceed_context_size_error"}}
    with pytest.raises(StreamError) as failed:
        assemble([error])
    assert failed.value.body == error
