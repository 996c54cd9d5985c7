"""Nothing an output guard should mask reaches the client: every text, every shape.

A masking PII guard on a route's output, and an upstream that puts a card number in every
place an answer can carry text: the fields known today, the ones vLLM renamed, one it adds
next month, an error's message. Plain and streamed, through each entry API. No byte the
client receives holds the number; what cannot be read is not sent at all.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from guardtools import CARD, Upstream, guards, pii

from fake_upstream import Reply
from gwtools import GatewayFactory

HEAD = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m"}
CHUNK = {**HEAD, "object": "chat.completion.chunk"}
DIGITS = "4111"  # in no masked answer, in no form
MASKED = "<CREDIT_CARD>"
TOOL = {"id": "call-1", "type": "function",
        "function": {"name": "send", "arguments": json.dumps({"to": CARD})}}


def _chat(message: dict[str, Any], **choice: Any) -> dict[str, Any]:
    return {**HEAD, "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", **message}, **choice}]}


# (case, the upstream's plain answer): each carries the card where a client reads text
PLAIN = [
    ("content", _chat({"content": f"card {CARD}"})),
    ("reasoning_content", _chat({"content": "ok", "reasoning_content": CARD})),
    ("reasoning (vLLM's new name)", _chat({"content": "ok", "reasoning": CARD})),
    ("refusal", _chat({"content": None, "refusal": f"I won't repeat {CARD}"})),
    ("audio transcript", _chat({"content": None, "audio": {
        "id": "a", "data": "UklGRg==", "expires_at": 1, "transcript": CARD}})),
    ("tool call arguments", _chat({"content": None, "tool_calls": [TOOL]})),
    ("a field added next month", _chat({"content": "ok", "annotations": [
        {"type": "url_citation", "url_citation": {"title": CARD, "url": "https://x"}}]})),
    ("logprobs, sent though not asked", _chat({"content": "ok"}, logprobs={"content": [
        {"token": CARD, "logprob": -0.1, "top_logprobs": [{"token": CARD}]}]})),
    ("text completion", {**HEAD, "object": "text_completion", "choices": [
        {"index": 0, "text": CARD, "finish_reason": "stop"}]}),
]


def _events(*deltas: dict[str, Any], **choice: Any) -> Reply:
    chunks = [{**CHUNK, "choices": [{"index": 0, "delta": d, **choice}]} for d in deltas]
    chunks.append({**CHUNK, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return Reply(chunks=[f"data: {json.dumps(c)}\n\n".encode() for c in chunks]
                 + [b"data: [DONE]\n\n"])


SPLIT = (CARD[:7], CARD[7:])  # the number across two events
STREAMED = [
    ("content", _events({"role": "assistant", "content": ""}, {"content": SPLIT[0]},
                        {"content": SPLIT[1]})),
    ("reasoning", _events({"reasoning": SPLIT[0]}, {"reasoning": SPLIT[1]})),
    ("reasoning_content", _events({"reasoning_content": CARD})),
    ("refusal", _events({"refusal": SPLIT[0]}, {"refusal": SPLIT[1]})),
    ("audio transcript", _events({"audio": {"id": "a", "transcript": SPLIT[0]}},
                                 {"audio": {"transcript": SPLIT[1]}})),
    ("a field added next month", _events({"commentary": CARD})),
    ("a list in a delta", _events({"annotations": [{"title": CARD}]})),
    ("logprobs", _events({"content": "ok"}, logprobs={"content": [{"token": CARD}]})),
    ("an error event", Reply(chunks=[
        f"data: {json.dumps({'error': {'message': f'cannot say {CARD}'}})}\n\n".encode()])),
    # beside the choices and beside a delta, and an event the upstream never finished
    ("a string beside the choices", Reply(chunks=[f"data: {json.dumps({**CHUNK, 'note': CARD, 'choices': [{'index': 0, 'delta': {'content': 'ok'}}]})}\n\n".encode(), b"data: [DONE]\n\n"])),  # noqa: E501
    ("a string beside a delta", Reply(chunks=[f"data: {json.dumps({**CHUNK, 'choices': [{'index': 0, 'delta': {'role': 'assistant'}, 'content_filter_results': {'pii': {'detail': CARD}}}]})}\n\n".encode(), b"data: [DONE]\n\n"])),  # noqa: E501
    ("the last event cut short", Reply(chunks=[f"data: {json.dumps({**CHUNK, 'choices': [{'index': 0, 'delta': {'content': CARD}}]})}".encode()])),  # noqa: E501
]


@pytest.mark.parametrize(("case", "answer"), PLAIN, ids=[c[0] for c in PLAIN])
async def test_a_plain_answer_reaches_the_client_with_every_text_masked(
        gateway: GatewayFactory, upstream: Upstream, case: str, answer: dict[str, Any]
        ) -> None:
    fake, _ = upstream
    completions = answer["object"] == "text_completion"
    fake.then(Reply(body=answer))
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    path, body = ("/v1/completions", {"model": "gpt-5.5", "prompt": "hi"}) if completions \
        else ("/v1/chat/completions", {"model": "gpt-5.5", "messages": [
            {"role": "user", "content": "hi"}]})
    resp = await client.post(path, json=body)
    raw = await resp.read()
    assert resp.status == 200, raw
    assert DIGITS not in raw.decode(), case
    if "logprobs" not in case:
        assert MASKED in raw.decode() or "%3CCREDIT_CARD%3E" in raw.decode(), raw


@pytest.mark.parametrize(("case", "reply"), STREAMED, ids=[c[0] for c in STREAMED])
async def test_a_stream_reaches_the_client_with_every_text_masked(
        gateway: GatewayFactory, upstream: Upstream, case: str, reply: Reply) -> None:
    fake, _ = upstream
    fake.then(reply)
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    assert DIGITS not in raw, (case, raw)
    events = [json.loads(line[6:]) for line in raw.splitlines()
              if line.startswith("data: {")]
    assert events, raw
    if case not in ("logprobs", "a delta that is not an object"):
        assert MASKED in raw, raw


async def test_an_anthropic_answer_is_masked_in_every_text(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(body=_chat({"content": CARD, "reasoning": CARD})))
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/messages", json={
        "model": "gpt-5.5", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    assert resp.status == 200 and DIGITS not in raw and MASKED in raw, raw


@pytest.mark.parametrize("asked", [{"logprobs": True}, {"logprobs": True, "top_logprobs": 2},
                                   {"top_logprobs": 1}])
async def test_log_probabilities_are_refused_while_output_guards_run(
        gateway: GatewayFactory, upstream: Upstream, asked: dict[str, Any]) -> None:
    fake, _ = upstream
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}], **asked})
    error = (await resp.json())["error"]
    assert (resp.status, error["code"]) == (400, "guardrail_unmaskable")
    assert error["param"] in asked and "without logprobs" in error["message"]
    assert fake.requests == []  # the model was not asked


@pytest.mark.parametrize(("reply", "status"), [
    (Reply(raw=f"card {CARD}".encode(), headers={"Content-Type": "text/plain"}), 502),
    (Reply(raw=b"[1, 2]"), 502),
    (Reply(status=500, raw=f"oops {CARD}".encode()), 500),
    (Reply(status=400, body={"error": {"message": f"bad: {CARD}"}}), 400),
], ids=["not JSON", "not an object", "an error that is not JSON", "a JSON error"])
async def test_what_the_guards_cannot_read_is_not_sent(
        gateway: GatewayFactory, upstream: Upstream, reply: Reply, status: int) -> None:
    fake, _ = upstream
    fake.then(reply)
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    assert resp.status == status and DIGITS not in raw, raw


async def test_a_stream_event_that_is_not_json_ends_the_stream_unsent(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=[f"data: {{not json {CARD}\n\n".encode(), b"data: [DONE]\n\n"]))
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    assert DIGITS not in raw and "guardrail_unchecked" in raw, raw


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": f"{CARD} " * 4000}]}),
    ("/v1/moderations", {"input": f"{CARD} " * 50_000}),  # 1 MB: minutes of analysis once
], ids=["chat", "moderation"])
async def test_more_text_than_the_guards_read_is_refused_with_the_limit(
        gateway: GatewayFactory, upstream: Upstream, path: str, body: dict[str, Any]) -> None:
    fake, _ = upstream
    client, _ = await gateway(guards(input=[pii("no-pii", "mask")]))
    resp = await client.post(path, json={"model": "gpt-5.5", **body})
    error = (await resp.json())["error"]
    assert (resp.status, error["code"]) == (413, "guardrail_text_too_long")
    assert "guardrails.maxCheckedChars" in error["message"] and "65536" in error["message"]
    assert fake.requests == []


async def test_a_delta_that_is_not_an_object_ends_the_stream_unsent(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=[f"data: {json.dumps({**CHUNK, 'choices': [{'index': 0, 'delta': [CARD]}]})}\n\n".encode()]))  # noqa: E501
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    raw = (await resp.read()).decode()
    assert DIGITS not in raw and "guardrail_unchecked" in raw, raw


async def test_a_request_a_guard_refuses_gives_its_reserved_tokens_back(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """Limits come before the guards now: what a refused request reserved goes back."""
    fake, _ = upstream
    client, _ = await gateway({**guards(input=[pii("no-cards", "block",
                                                   entities=["CREDIT_CARD"])]),
                               "rateLimit": {"tokensPerMinute": 1000}})
    codes = []
    for _ in range(3):  # each reserves its prompt and 600 tokens of answer
        resp = await client.post("/v1/chat/completions", json={
            "model": "gpt-5.5", "max_tokens": 600,
            "messages": [{"role": "user", "content": f"card {CARD}"}]})
        codes.append((resp.status, (await resp.json())["error"]["code"]))
    assert codes == [(400, "guardrail_blocked")] * 3
    assert fake.requests == []
