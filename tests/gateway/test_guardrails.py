"""Guardrails at the gateway: personal data masked, blocked or counted, on the way in and out.

Through the OpenAI SDK, as clients call it; the upstream is the fake one, which records
what it was sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from guardtools import (
    CARD,
    MAIL,
    SECRET_TEXT,
    Upstream,
    ask,
    chunked,
    guards,
    pii,
    sdk,
    sent,
    streamed,
    streamed_tool_call,
    streamed_until_error,
    text_of,
)

from llm_operator.access.keyring import digest
from llm_operator.guardrails.pii import shared_scanner

from fake_upstream import Reply, completion
from gwtools import GatewayFactory, metric

TEAM, AUDIT = "sk-llmop-team-key", "sk-llmop-audit-key"

async def test_a_masking_input_guard_sends_the_types_not_the_data(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway(guards(input=[pii("no-pii", "mask")]))
    await ask(client)
    assert sent(fake) == "My card is <CREDIT_CARD>, mail me at <EMAIL_ADDRESS>"
    for entity in ("CREDIT_CARD", "EMAIL_ADDRESS"):
        assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                      guard="no-pii", direction="input", action="mask", entity=entity) == 1


async def test_a_blocking_input_guard_refuses_with_its_name_and_never_calls_the_model(
        gateway: GatewayFactory, upstream: Upstream, caplog: pytest.LogCaptureFixture
        ) -> None:
    fake, _ = upstream
    caplog.set_level(logging.DEBUG)
    client, gw = await gateway(guards(input=[pii("no-cards", "block",
                                                 entities=["CREDIT_CARD"])]))
    with pytest.raises(openai.BadRequestError) as refused:
        await ask(client)
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["param"]) == ("guardrail_blocked", "no-cards")
    assert "CREDIT_CARD" in error["message"] and CARD not in error["message"]
    assert fake.requests == []
    assert metric(gw, "llmop_gateway_requests_total", route="gpt-5.5", status="400") == 1
    assert CARD not in caplog.text and MAIL not in caplog.text


@pytest.mark.parametrize(("path", "field", "value", "refused"), [
    ("/v1/completions", "prompt", [4111, 1111, 1111, 1111], True),  # token ids: unreadable
    ("/v1/completions", "prompt", [[9906, 1917], [15339]], True),
    ("/v1/completions", "prompt", ["card", 4111], True),
    ("/v1/completions", "prompt", {"text": CARD}, True),
    ("/v1/embeddings", "input", [[4111, 1111]], True),
    ("/v1/completions", "prompt", ["Hello", "world"], False),  # text: read, and sent
    ("/v1/embeddings", "input", "Hello", False),
])
async def test_a_prompt_of_token_ids_is_refused_where_input_guards_read_text(
        gateway: GatewayFactory, upstream: Upstream, path: str, field: str, value: Any,
        refused: bool) -> None:
    fake, _ = upstream
    client, _ = await gateway(guards(input=[pii("no-pii", "mask")]))
    resp = await client.post(path, json={"model": "gpt-5.5", field: value})
    body = await resp.json()
    if refused:
        assert resp.status == 400, body
        assert (body["error"]["code"], body["error"]["param"]) == ("guardrail_unreadable",
                                                                   field)
        assert f"send {field} as text" in body["error"]["message"]
        assert fake.requests == []  # what the ids encode never reached the model
    else:
        assert resp.status == 200, body
        assert fake.requests[-1]["body"][field] == value


async def test_a_logging_guard_counts_and_lets_the_text_through(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway(guards(input=[pii("watch", "log")]))
    await ask(client)
    assert sent(fake) == SECRET_TEXT
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="watch", direction="input", action="log", entity="CREDIT_CARD") == 1


async def test_text_without_personal_data_goes_as_the_client_sent_it(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway(guards(input=[pii("no-pii", "block")]))
    answer = await ask(client, "Tell me a story about a fox")
    assert answer.choices[0].message.content == "Hello!"
    assert sent(fake) == "Tell me a story about a fox"
    assert metric(gw, "llmop_gateway_guardrail_seconds_count", route="gpt-5.5",
                  direction="input") == 1


async def test_a_key_exempted_from_a_guard_skips_it_and_a_header_cannot(
        gateway: GatewayFactory, upstream: Upstream, tmp_path: Path) -> None:
    fake, _ = upstream
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [
        {"id": "team", "sha256": digest(TEAM)},
        {"id": "audit", "sha256": digest(AUDIT), "exemptGuards": ["no-*"]}]}))
    client, _ = await gateway(guards(input=[pii("no-pii", "mask")]),
                              {"clientKeys": {"file": str(keys)}})
    await ask(client, key=AUDIT)
    assert sent(fake) == SECRET_TEXT
    await ask(client, key=TEAM, extra_headers={"x-llmop-exempt-guards": "no-pii"})
    assert sent(fake) == "My card is <CREDIT_CARD>, mail me at <EMAIL_ADDRESS>"


async def test_a_masking_output_guard_masks_a_plain_answer(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(body=completion("gpt-5.5", f"Sure: {CARD}")))
    client, gw = await gateway(guards(output=[pii("no-pii", "mask")]))
    answer = await ask(client, "What was my card?")
    assert answer.choices[0].message.content == "Sure: <CREDIT_CARD>"
    assert answer.usage is not None and answer.usage.completion_tokens == 3
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="no-pii", direction="output", action="mask",
                  entity="CREDIT_CARD") == 1


def tool_call(arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": "call-1", "type": "function",
            "function": {"name": "send_mail", "arguments": json.dumps(arguments)}}


async def test_a_masking_input_guard_masks_an_earlier_tool_calls_arguments(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """An agent's conversation carries the tool calls the model made: their arguments are
    text sent to the model too (to a remote provider, for a remote model)."""
    fake, _ = upstream
    client, _ = await gateway(guards(input=[pii("no-pii", "mask")]))
    async with sdk(client) as oai:
        await oai.chat.completions.create(model="gpt-5.5", messages=[
            {"role": "user", "content": "Mail my card number to me"},
            {"role": "assistant", "content": None,
             "tool_calls": [tool_call({"to": MAIL, "body": f"card {CARD}", "copies": 1})]},
            {"role": "tool", "tool_call_id": "call-1", "content": "sent"}])
    (call,) = fake.requests[-1]["body"]["messages"][1]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {
        "to": "<EMAIL_ADDRESS>", "body": "card <CREDIT_CARD>", "copies": 1}


async def test_a_masking_output_guard_masks_the_arguments_of_a_tool_call_it_answers(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    answer = completion("gpt-5.5", "")
    answer["choices"][0]["message"] = {"role": "assistant", "content": None,
                                       "tool_calls": [tool_call({"to": MAIL})]}
    answer["choices"][0]["finish_reason"] = "tool_calls"
    fake.then(Reply(body=answer))
    client, gw = await gateway(guards(output=[pii("no-pii", "mask")]))
    got = await ask(client, "Mail me")
    (call,) = got.choices[0].message.tool_calls or []
    assert json.loads(call.function.arguments) == {"to": "<EMAIL_ADDRESS>"}
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="no-pii", direction="output", action="mask",
                  entity="EMAIL_ADDRESS") == 1


async def test_a_blocking_output_guard_refuses_the_answer_after_counting_its_tokens(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(body=completion("gpt-5.5", f"mail {MAIL}")))
    client, gw = await gateway(guards(output=[pii("no-pii", "block")]))
    with pytest.raises(openai.BadRequestError) as refused:
        await ask(client, "Who wrote?")
    assert "the model's answer" in str(refused.value) and MAIL not in str(refused.value)
    assert metric(gw, "llmop_gateway_tokens_total", route="gpt-5.5", kind="completion") == 3


@pytest.mark.parametrize("include_usage", [False, True])
async def test_a_stream_is_checked_as_it_comes_and_no_chunk_carries_the_data(
        gateway: GatewayFactory, upstream: Upstream, include_usage: bool) -> None:
    fake, _ = upstream
    filler = "The weather is fine today and the sea is calm. " * 3
    fake.then(chunked([filler, "Your card is 4111 11", "11 1111 1111", " and more ", filler]))
    client, _ = await gateway({"guardrails": {"output": [pii("no-pii", "mask")],
                                              "streamHoldBackChars": 32}})
    chunks = await streamed(client, stream_options={"include_usage": include_usage})
    pieces = text_of(chunks)
    assert "".join(pieces) == f"{filler}Your card is <CREDIT_CARD> and more {filler}"
    assert len(pieces) > 2  # sent as it came, not whole at the end
    assert not any("1111" in p for p in pieces)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert (chunks[-1].usage is not None) == include_usage
    assert fake.requests[-1]["body"]["stream"] is True


async def test_a_streamed_tool_call_is_held_whole_and_its_arguments_masked(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """Its arguments come in pieces that each hold part of the address: held until the
    choice ends, checked whole, sent as one delta the SDK assembles as usual."""
    fake, _ = upstream
    fake.then(streamed_tool_call(json.dumps({"to": MAIL, "subject": "hello"}), pieces=6))
    client, gw = await gateway(guards(output=[pii("no-pii", "mask")]))
    async with sdk(client) as oai, oai.beta.chat.completions.stream(
            model="gpt-5.5", messages=[{"role": "user", "content": "Mail me"}]) as stream:
        pieces = [e.arguments_delta async for e in stream
                  if e.type == "tool_calls.function.arguments.delta"]
        final = await stream.get_final_completion()
    (call,) = final.choices[0].message.tool_calls or []
    assert (call.id, call.function.name) == ("call-1", "send_mail")
    assert json.loads(call.function.arguments) == {"to": "<EMAIL_ADDRESS>", "subject": "hello"}
    assert not any("example" in p for p in pieces)
    assert final.choices[0].finish_reason == "tool_calls"
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="no-pii", direction="output", action="mask",
                  entity="EMAIL_ADDRESS") == 1


async def test_a_streamed_tool_call_a_guard_blocks_ends_the_stream_with_the_error(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(streamed_tool_call(json.dumps({"card": CARD})))
    client, _ = await gateway(guards(output=[pii("no-cards", "block",
                                                 entities=["CREDIT_CARD"])]))
    received, error = await streamed_until_error(client, "Pay")
    assert "guardrail 'no-cards' blocked" in str(error)
    assert not any(c.choices and c.choices[0].delta.tool_calls for c in received)


async def test_a_guard_that_blocks_mid_stream_ends_it_with_an_error_the_sdk_raises(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    filler = "Once upon a time there was a quiet village by the sea. " * 2
    reply = chunked([filler, f"mail {MAIL} now", *[filler] * 20])
    reply.chunk_gap = 0.05  # still generating when the guard blocks (a second more)
    fake.then(reply)
    await asyncio.to_thread(shared_scanner)  # built: the check is not what waits
    client, _ = await gateway({"guardrails": {"output": [pii("no-pii", "block")],
                                              "streamHoldBackChars": 32}})
    received, error = await streamed_until_error(client)
    assert "guardrail 'no-pii' blocked the model's answer" in str(error)
    assert "".join(text_of(received)).startswith("Once upon a time")  # the clean part came
    assert not any(MAIL in p for p in text_of(received))
    async with asyncio.timeout(5):
        await fake.stream_cancelled.wait()  # the generation was cut, not read to its end


async def test_an_anthropic_stream_with_output_guards_is_refused_with_what_to_do(
        gateway: GatewayFactory) -> None:
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/messages", json={
        "model": "gpt-5.5", "max_tokens": 8, "stream": True,
        "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status == 400
    assert "without stream" in (await resp.json())["error"]["message"]


async def test_the_moderation_endpoint_runs_the_models_guards(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway(guards(input=[pii("no-cards", "block",
                                                 entities=["CREDIT_CARD"])],
                                      output=[pii("no-pii", "mask")]))
    async with sdk(client) as oai:
        result = await oai.moderations.create(model="gpt-5.5",
                                              input=[SECRET_TEXT, "a fox", f"mail {MAIL}"])
    flagged = [(r.flagged, r.categories.model_extra or {}) for r in result.results]
    assert flagged == [(True, {"pii": True}), (False, {"pii": False}),
                       (True, {"pii": True})]
    first = result.results[0].model_extra or {}
    assert first["llmop"]["guards"] == [
        {"name": "no-cards", "entities": ["CREDIT_CARD"], "score": 1.0},
        {"name": "no-pii", "entities": ["CREDIT_CARD", "EMAIL_ADDRESS"], "score": 1.0}]
    assert fake.requests == []  # checked here; the model was not asked
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="no-pii", direction="moderation", action="flag",
                  entity="EMAIL_ADDRESS") == 2


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"model": "gpt-5.5"}, 400, "invalid_input"),
    ({"model": "gpt-5.5", "input": [{"type": "image_url", "image_url": {"url": "x"}}]},
     400, "invalid_input"),
    ({"model": "gpt-9", "input": "hi"}, 404, "model_not_found"),
    ({"input": "hi"}, 400, "missing_model"),
])
async def test_a_moderation_request_that_cannot_be_checked_says_why(
        gateway: GatewayFactory, body: dict[str, Any], status: int, code: str) -> None:
    client, _ = await gateway(guards(input=[pii("no-pii", "mask")]))
    resp = await client.post("/v1/moderations", json=body)
    assert (resp.status, (await resp.json())["error"]["code"]) == (status, code)


async def test_guards_that_cannot_run_refuse_the_request_and_say_so_once(
        gateway: GatewayFactory, upstream: Upstream, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _ = upstream

    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'presidio_analyzer'",
                                  name="presidio_analyzer")
    monkeypatch.setattr("llm_operator.guardrails.runner.shared_scanner", missing)
    client, gw = await gateway(guards(input=[pii("no-pii", "mask")]))
    for _ in range(2):
        with pytest.raises(openai.InternalServerError) as refused:
            await ask(client)
        assert refused.value.status_code == 503
        assert "llm-operator[guardrails]" in str(refused.value)
    assert fake.requests == []
    assert caplog.text.count("guardrails cannot run") == 1
    assert metric(gw, "llmop_gateway_guardrail_errors_total", route="gpt-5.5",
                  direction="input") == 2


async def test_a_text_completion_stream_is_checked_as_it_comes(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    head = {"id": "t", "object": "text_completion", "created": 1, "model": "m"}
    pieces = ["Call me at ", "jane.doe@", "example.com", " tomorrow, ", "and bring the map."]
    events = [{**head, "choices": [{"index": 0, "text": p, "finish_reason": None}]}
              for p in pieces]
    events.append({**head, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
    fake.then(Reply(chunks=[f"data: {json.dumps(e)}\n\n".encode() for e in events]
                    + [b"data: [DONE]\n\n"]))
    client, _ = await gateway({"guardrails": {"output": [pii("no-pii", "mask")],
                                              "streamHoldBackChars": 16}})
    async with sdk(client) as oai:
        stream = await oai.completions.create(model="gpt-5.5", prompt="Say", stream=True)
        chunks = [c async for c in stream]
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == "Call me at <EMAIL_ADDRESS> tomorrow, and bring the map."
    assert "" not in texts[:-1]  # no empty chunk for each token held
    assert chunks[-1].choices[0].finish_reason == "length"
