"""Where guards read a request's and an answer's text, by API, and how they rewrite it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from llm_operator.api.guardrails import GuardrailsSpec
from llm_operator.guardrails.text import (
    answer_spots,
    asks_unmaskable,
    drop_unmaskable,
    request_spots,
)

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


@pytest.mark.parametrize(("path", "body", "texts"), [
    ("/v1/chat/completions", {"messages": [
        {"role": "system", "content": "Be brief"},
        {"role": "user", "content": [{"type": "text", "text": "Look:"}, IMAGE]},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "tool", "content": "42", "tool_call_id": "t1"}]},
     ["Be brief", "Look:", "42"]),
    ("/chat/completions", {"messages": [{"role": "user", "content": "translated"}]},
     ["translated"]),  # /v1/messages, as ReadBody translated it
    ("/v1/completions", {"prompt": "Once upon"}, ["Once upon"]),
    ("/v1/completions", {"prompt": ["one", "two"]}, ["one", "two"]),
    ("/v1/completions", {"prompt": [101, 2023]}, []),  # token ids: no text
    ("/v1/embeddings", {"input": ["a", 7, "b"]}, ["a", "b"]),
    ("/v1/responses", {"instructions": "Be kind", "input": "Hi"}, ["Be kind", "Hi"]),
    ("/v1/responses", {"input": [{"role": "user", "content": [
        {"type": "input_text", "text": "Hi"}]}]}, ["Hi"]),
    ("/v1/responses", {"input": [{"type": "function_call", "call_id": "c1", "name": "f",
                                  "arguments": '{"q": "find a@b.io"}'},
                                 {"type": "function_call_output", "call_id": "c1",
                                  "output": "done"}]}, ["find a@b.io", "done"]),
    ("/v1/chat/completions", {"messages": "not a list"}, []),
    # an assistant's earlier tool calls: each string value of their JSON arguments
    ("/v1/chat/completions", {"messages": [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "t1", "type": "function", "function": {
                "name": "send", "arguments": '{"to": "a@b.io", "n": 2, "cc": ["c@d.io"], '
                                             '"opts": {"note": "hi"}}'}},
            {"id": "t2", "type": "function", "function": {"name": "x",
                                                          "arguments": "not json"}},
            {"id": "t3", "type": "function", "function": {"name": "y"}}]}]},
     ["a@b.io", "c@d.io", "hi", "not json"]),
])
def test_a_requests_text_is_found_by_its_api(path: str, body: dict[str, Any],
                                             texts: list[str]) -> None:
    assert [spot.text for spot in request_spots(path, body)] == texts


CARD = "4111 1111 1111 1111"


@pytest.mark.parametrize(("body", "texts"), [
    ({"choices": [{"message": {"content": "Hi", "reasoning_content": "think"}},
                  {"message": {"content": None, "tool_calls": [{"id": "1"}]}}]}, ["Hi", "think"]),
    ({"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {
            "name": "call", "arguments": '{"phone": "+1 415 555 0100"}'}}]}}]},
     ["+1 415 555 0100"]),
    ({"choices": [{"text": "one"}, {"text": "two"}]}, ["one", "two"]),
    ({"output": [{"type": "message", "content": [{"type": "output_text", "text": "Hello"}]}]},
     ["Hello"]),
    ({"output": [{"type": "function_call", "name": "f", "arguments": '{"to": ["x@y.io"]}'}]},
     ["x@y.io"]),
    ({"data": [{"embedding": [0.1]}]}, []),
    # what a checklist of known fields missed: vLLM's reasoning, a refusal, an audio
    # transcript, a field the upstream adds next month, an error's message
    ({"choices": [{"message": {"role": "assistant", "content": None, "reasoning": CARD,
                               "refusal": "no, " + CARD}}]}, [CARD, "no, " + CARD]),
    ({"choices": [{"message": {"audio": {"id": "a1", "data": "UklGR", "transcript": CARD}}}]},
     [CARD]),
    ({"choices": [{"message": {"content": "a", "next_months_field": {"notes": [CARD]}}}]},
     ["a", CARD]),
    ({"error": {"message": f"cannot say {CARD}", "type": "invalid_request_error"}},
     [f"cannot say {CARD}"]),
    # identifiers and enumerations are not text
    ({"id": "chatcmpl-1", "object": "chat.completion", "model": "m", "system_fingerprint": "f",
      "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}}]},
     []),
], ids=["chat", "tool call", "completions", "responses", "function call", "embeddings",
        "reasoning and refusal", "audio transcript", "a new field", "error", "identifiers"])
def test_an_answers_text_is_every_string_but_identifiers(body: dict[str, Any],
                                                       texts: list[str]) -> None:
    assert [spot.text for spot in answer_spots(body)] == texts


@pytest.mark.parametrize(("body", "asked"), [
    ({"logprobs": True, "top_logprobs": 3}, "logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"logprobs": 5}, "logprobs"),  # text completions: a count
    ({"logprobs": 0}, "logprobs"),  # text completions: the sampled tokens' own
    ({"logprobs": False, "top_logprobs": 0}, None),
    ({}, None),
])
def test_log_probabilities_are_what_output_guards_cannot_mask(body: dict[str, Any],
                                                               asked: str | None) -> None:
    assert asks_unmaskable(body) == asked


def test_log_probabilities_are_dropped_from_an_answer() -> None:
    answer = {"choices": [{"message": {"content": "x"}, "logprobs": {"content": [
        {"token": CARD, "top_logprobs": [{"token": CARD}]}]}}]}
    assert drop_unmaskable(answer) is True
    assert answer == {"choices": [{"message": {"content": "x"}}]}
    assert drop_unmaskable(answer) is False


def test_a_deeply_nested_answer_is_read_without_recursion() -> None:
    deep: Any = CARD
    for _ in range(5000):
        deep = {"inner": [deep]}
    assert [s.text for s in answer_spots({"x": deep})] == [CARD]


def test_a_spot_rewrites_its_string_in_place() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a@b.io"}]}],
            "prompt": ["x", "y"]}
    (spot,) = request_spots("/v1/chat/completions", body)
    spot.replace("<EMAIL_ADDRESS>")
    assert body["messages"][0]["content"][0]["text"] == "<EMAIL_ADDRESS>"
    second = request_spots("/v1/completions", body)[1]
    second.replace("Y")
    assert body["prompt"] == ["x", "Y"]


def test_every_guard_runs_once_by_name_in_declared_order() -> None:
    rails = GuardrailsSpec.model_validate({
        "input": [{"name": "a", "pii": {}}, {"name": "b", "pii": {}}],
        "output": [{"name": "a", "action": "log", "pii": {}}, {"name": "c", "pii": {}}]})
    assert [(g.name, g.action) for g in rails.every_guard] == [
        ("a", "block"), ("b", "block"), ("c", "block")]


def test_a_tool_calls_arguments_stay_json_when_a_value_is_masked() -> None:
    arguments = '{"to": "a@b.io", "note": "say \\"hi\\"", "n": 2}'
    body = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "send",
                                                     "arguments": arguments}}]}}]}
    to, note = answer_spots(body)
    to.replace("<EMAIL_ADDRESS>")
    written = body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(written) == {"to": "<EMAIL_ADDRESS>", "note": 'say "hi"', "n": 2}
    assert note.text == 'say "hi"'  # the others read the parsed values, quotes unescaped


@pytest.mark.parametrize(("arguments", "texts", "written"), [
    ('"john@example.com"', ["john@example.com"], '"<EMAIL_ADDRESS>"'),  # a JSON string
    ("[" * 500 + '"john@example.com"' + "]" * 500, ["john@example.com"],
     "[" * 500 + '"<EMAIL_ADDRESS>"' + "]" * 500),  # deep: read without recursion
    ("[" * 5000 + "]" * 5000, ["[" * 5000 + "]" * 5000], "<EMAIL_ADDRESS>"),  # too deep to
    ("42", [], None),  # parse: one text; a number: none
])
def test_a_tool_calls_arguments_are_read_whatever_json_they_are(
        arguments: str, texts: list[str], written: str | None) -> None:
    body = {"choices": [{"message": {"tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": arguments}}]}}]}
    spots = answer_spots(body)
    assert [s.text for s in spots] == texts
    if spots:
        spots[0].replace("<EMAIL_ADDRESS>")
        function = body["choices"][0]["message"]["tool_calls"][0]["function"]
        assert function["arguments"].replace(" ", "") == written
