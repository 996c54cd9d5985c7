"""Guardrails at the gateway: personal data masked, blocked or counted, on the way in and out.

Through the OpenAI SDK, as clients call it; the upstream is the fake one, which records
what it was sent.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from llm_operator.access.keyring import digest

from fake_upstream import FakeUpstream, Reply, completion, sse_chunks
from gwtools import GatewayFactory, metric

Upstream = tuple[FakeUpstream, str]
CARD, MAIL = "4111 1111 1111 1111", "jane.doe@example.com"
SECRET_TEXT = f"My card is {CARD}, mail me at {MAIL}"
TEAM, AUDIT = "sk-llmop-team-key", "sk-llmop-audit-key"


def guards(*, input: list[dict[str, Any]] | None = None,
           output: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"guardrails": {k: v for k, v in (("input", input), ("output", output)) if v}}


def pii(name: str, action: str, **more: Any) -> dict[str, Any]:
    return {"name": name, "action": action, "pii": more}


def sdk(client: Any, key: str = "unused") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key=key,
                              max_retries=0)


async def ask(client: Any, text: str = SECRET_TEXT, **kwargs: Any) -> Any:
    async with sdk(client, kwargs.pop("key", "unused")) as oai:
        return await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": text}], **kwargs)


def sent(fake: FakeUpstream) -> str:
    content = fake.requests[-1]["body"]["messages"][0]["content"]
    assert isinstance(content, str)
    return content


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
async def test_a_stream_with_output_guards_arrives_checked_whole(
        gateway: GatewayFactory, upstream: Upstream, include_usage: bool) -> None:
    fake, _ = upstream
    fake.then(Reply(body=completion("gpt-5.5", f"It is {CARD}.")))
    client, _ = await gateway(guards(output=[pii("no-pii", "mask")]))
    async with sdk(client) as oai:
        stream = await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "My card?"}], stream=True,
            stream_options={"include_usage": include_usage})
        chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "It is <CREDIT_CARD>."
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert (chunks[-1].usage is not None) == include_usage
    assert fake.requests[-1]["body"]["stream"] is False  # asked plain, to check it whole


async def test_a_collected_stream_is_checked_then_streamed(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """A llama.cpp route (streamUpstream): the engine streams, the gateway assembles."""
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Mail ", MAIL[:8], MAIL[8:]])))
    client, _ = await gateway({**guards(output=[pii("no-pii", "mask")]),
                               "streamUpstream": True})
    async with sdk(client) as oai:
        stream = await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "Mail?"}], stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Mail <EMAIL_ADDRESS>"
    assert fake.requests[-1]["body"]["stream"] is True


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
