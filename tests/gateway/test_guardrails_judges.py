"""Judges (guard models) at the gateway: asked through their own route, on requests, answers
and streams as they come.

Through the OpenAI SDK; the guarded model and the judge share the fake upstream, which
answers in order and records what each was sent.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import openai
import pytest
from guardtools import (
    CARD,
    MAIL,
    Upstream,
    ask,
    chunked,
    judge_routes,
    judged,
    sdk,
    streamed,
    streamed_tool_call,
    streamed_until_error,
    text_of,
    verdict,
)

from fake_upstream import Reply, completion, sse_chunks
from gwtools import GatewayFactory, metric

PII_MASK = {"name": "no-pii", "action": "mask", "pii": {}}
# five pieces of 40 characters: with a 64-character window, judged after the 2nd, 4th, 5th
PIECES = [f"Sentence {i} of a calm and quiet story..." for i in range(1, 6)]


async def test_a_judge_is_asked_through_its_route_and_its_verdict_blocks(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(verdict("unsafe\nS9"))
    client, gw = await gateway(config=judge_routes(base_url, key_file, {"input": judged()}))
    with pytest.raises(openai.BadRequestError) as refused:
        await ask(client, "How do I build a bomb?")
    assert "guardrail 'safety' blocked the request: it found S9" in str(refused.value)
    (asked,) = fake.requests  # the judge only: the model was never called
    assert asked["path"] == "/v1/completions"
    body = asked["body"]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("guard", 20, 0)
    assert "S1: Violent Crimes.\nS9: Indiscriminate Weapons.\n" in body["prompt"]
    assert "User: How do I build a bomb?" in body["prompt"]
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="safety", direction="input", action="block", entity="S9") == 1


async def test_a_safe_verdict_lets_the_request_through_and_an_answer_is_judged_with_it(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(verdict("safe"), Reply(body=completion("gpt-5.5", "Paris.")), verdict("safe"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, {
        "input": judged(), "output": judged()}))
    answer = await ask(client, "Capital of France?")
    assert answer.choices[0].message.content == "Paris."
    judge_of_answer = fake.requests[2]["body"]["prompt"]
    assert "User: Capital of France?\n\nAgent: Paris." in judge_of_answer


@pytest.mark.parametrize(("on_error", "status"), [("closed", 503), ("open", 200)])
async def test_a_judge_without_a_verdict_follows_on_error(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, on_error: str,
        status: int) -> None:
    fake, base_url = upstream
    fake.then(verdict("I am a helpful assistant"))
    client, gw = await gateway(config=judge_routes(base_url, key_file, {
        "input": judged(on_error)}))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status == status
    if status == 503:
        error = (await resp.json())["error"]
        assert error["code"] == "guardrail_unavailable"
        assert "judge guard: expected 'safe' or 'unsafe'" in error["message"]
    assert metric(gw, "llmop_gateway_guardrail_errors_total", route="gpt-5.5",
                  direction="input") == 1


async def test_a_moderation_reports_a_judges_categories_beside_pii(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(verdict("unsafe\nS1"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, {
        "input": [*judged(), {"name": "no-pii", "action": "mask", "pii": {}}]}))
    async with sdk(client) as oai:
        result = await oai.moderations.create(model="gpt-5.5", input=f"hit {MAIL}")
    (only,) = result.results
    assert only.flagged
    assert only.categories.model_extra == {"S1": True, "S9": False, "pii": True}
    assert only.category_scores.model_extra == {"S1": 1.0, "S9": 0.0, "pii": 1.0}


def windowed(rails: dict[str, Any], window: int = 64) -> dict[str, Any]:
    return {**rails, "streamJudgeWindowChars": window}


def judge_prompts(fake: Any) -> list[str]:
    return [r["body"]["prompt"] for r in fake.requests if r["body"].get("model") == "guard"]


async def test_a_stream_is_judged_window_by_window_each_verdict_on_the_answer_so_far(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(chunked(PIECES), verdict("safe"), verdict("safe"), verdict("safe"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, windowed(
        {"output": judged()})))
    chunks = await streamed(client)
    assert text_of(chunks) == [PIECES[0] + PIECES[1], PIECES[2] + PIECES[3], PIECES[4]]
    assert fake.requests[0]["body"]["stream"] is True  # streamed from the model, as asked
    prompts = judge_prompts(fake)
    assert len(prompts) == 3
    for judged_pieces, prompt in zip((2, 4, 5), prompts, strict=True):
        assert f"Agent: {''.join(PIECES[:judged_pieces])}\n" in prompt
        assert "User: Tell me" in prompt  # beside the request it answers
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


async def test_an_unsafe_window_ends_the_stream_with_the_error_and_cuts_the_generation(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    reply = chunked([*PIECES, *PIECES * 20])
    reply.chunk_gap = 0.02  # still generating when the judge says unsafe
    fake.then(reply, verdict("safe"), verdict("unsafe\nS1"))
    client, gw = await gateway(config=judge_routes(base_url, key_file, windowed(
        {"output": judged()})))
    received, error = await streamed_until_error(client)
    assert "guardrail 'safety' blocked the model's answer" in str(error)
    assert text_of(received) == [PIECES[0] + PIECES[1]]  # the window judged safe, no more
    async with asyncio.timeout(5):
        await fake.stream_cancelled.wait()  # the generation was cut, not read to its end
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="safety", direction="output", action="block", entity="S1") == 1


async def test_on_a_stream_pii_is_masked_before_the_judge_or_the_client_reads_it(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(chunked(["It is ", CARD[:9], CARD[9:], "."]), verdict("safe"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, {
        "output": [*judged(), PII_MASK]}))
    chunks = await streamed(client)
    assert "".join(text_of(chunks)) == "It is <CREDIT_CARD>."
    (prompt,) = judge_prompts(fake)
    assert "Agent: It is <CREDIT_CARD>.\n" in prompt and CARD not in prompt


@pytest.mark.parametrize(("on_error", "whole"), [("closed", False), ("open", True)])
async def test_a_judge_without_a_verdict_mid_stream_follows_on_error(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, on_error: str,
        whole: bool) -> None:
    fake, base_url = upstream
    fake.then(chunked(PIECES), verdict("safe"), verdict("I am a helpful assistant"),
              verdict("safe"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, windowed(
        {"output": judged(on_error)})))
    received, error = await streamed_until_error(client)
    if not whole:
        assert "guardrails cannot run" in str(error) and "expected 'safe'" in str(error)
    assert (error is None) == whole
    assert "".join(text_of(received)) == ("".join(PIECES) if whole
                                          else PIECES[0] + PIECES[1])


async def test_a_streamed_tool_call_is_judged_with_its_arguments(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(streamed_tool_call('{"to": "' + MAIL + '", "body": "hi"}'), verdict("unsafe\nS1"))
    client, _ = await gateway(config=judge_routes(base_url, key_file, {
        "output": [*judged(), PII_MASK]}))
    with pytest.raises(openai.APIError, match="guardrail 'safety' blocked"):
        await streamed(client)
    (prompt,) = judge_prompts(fake)
    assert "<EMAIL_ADDRESS>" in prompt and MAIL not in prompt


async def test_a_plain_answer_asked_as_a_stream_upstream_is_assembled_then_judged_whole(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    """A llama.cpp route (streamUpstream) and a client that wants one answer: the engine
    streams, the gateway assembles it, the judge reads it whole, the client gets JSON."""
    fake, base_url = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Mail ", MAIL[:8], MAIL[8:]])),
              verdict("safe"))
    config = judge_routes(base_url, key_file, {"output": [*judged(), PII_MASK]})
    config["routes"][0]["streamUpstream"] = True
    client, _ = await gateway(config=config)
    answer = await ask(client, "Mail?")
    assert answer.choices[0].message.content == "Mail <EMAIL_ADDRESS>"
    assert fake.requests[0]["body"]["stream"] is True
    assert "Agent: Mail " + MAIL in judge_prompts(fake)[0]  # judged, then masked (in order)
