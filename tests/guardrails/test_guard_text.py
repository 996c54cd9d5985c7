"""Where guards read a request's and an answer's text, by API, and how they rewrite it."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.guardrails import GuardrailsSpec
from llm_operator.guardrails.text import answer_spots, request_spots

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
    ("/v1/chat/completions", {"messages": "not a list"}, []),
])
def test_a_requests_text_is_found_by_its_api(path: str, body: dict[str, Any],
                                             texts: list[str]) -> None:
    assert [spot.text for spot in request_spots(path, body)] == texts


@pytest.mark.parametrize(("path", "body", "texts"), [
    ("/v1/chat/completions", {"choices": [
        {"message": {"content": "Hi", "reasoning_content": "think"}},
        {"message": {"content": None, "tool_calls": [{"id": "1"}]}}]}, ["Hi", "think"]),
    ("/v1/completions", {"choices": [{"text": "one"}, {"text": "two"}]}, ["one", "two"]),
    ("/v1/responses", {"output": [{"type": "message", "content": [
        {"type": "output_text", "text": "Hello"}]}]}, ["Hello"]),
    ("/v1/embeddings", {"data": [{"embedding": [0.1]}]}, []),
])
def test_an_answers_text_is_found_by_its_api(path: str, body: dict[str, Any],
                                             texts: list[str]) -> None:
    assert [spot.text for spot in answer_spots(path, body)] == texts


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
