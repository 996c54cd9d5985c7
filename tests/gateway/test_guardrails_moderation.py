"""A moderation endpoint as a guard: OpenAI's /v1/moderations asked through its own route.

The guarded model and the moderation model (a remote route with its key, as
omni-moderation-latest would be) share the fake upstream, which records what each was sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from guardtools import chunked, streamed_until_error, text_of

from fake_upstream import FakeUpstream, Reply, completion
from gwtools import GatewayFactory, metric

Upstream = tuple[FakeUpstream, str]
MODERATOR = "omni-moderation-latest"


def routes(base_url: str, key_file: Path, rails: dict[str, Any] | None) -> dict[str, Any]:
    upstream = {"baseUrl": base_url, "apiKey": {"file": str(key_file)}}
    guarded: dict[str, Any] = {"models": ["gpt-5.5"], "upstream": upstream}
    if rails is not None:
        guarded["guardrails"] = rails
    return {"routes": [guarded, {"models": [MODERATOR], "upstream": upstream}]}


def moderated(on_error: str = "closed", action: str = "block", **more: Any
              ) -> list[dict[str, Any]]:
    return [{"name": "policy", "action": action, "onError": on_error,
             "moderation": {"model": MODERATOR, **more}}]


def scores(flagged: dict[str, float], threshold: float = 0.5) -> dict[str, Any]:
    """One result as OpenAI answers it: every category scored, flagged above threshold."""
    every = {"harassment": 0.01, "hate": 0.01, "violence": 0.01, "self-harm": 0.01,
             **flagged}
    return {"flagged": any(s >= threshold for s in every.values()),
            "categories": {c: s >= threshold for c, s in every.items()},
            "category_scores": every}


def moderation(*results: dict[str, Any]) -> Reply:
    return Reply(body={"id": "modr-1", "model": MODERATOR, "results": list(results)})


def sdk(client: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="unused",
                              max_retries=0)


async def ask(client: Any, text: str) -> Any:
    async with sdk(client) as oai:
        return await oai.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": text}])


async def test_a_flagged_category_blocks_and_the_model_is_never_called(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(moderation(scores({"violence": 0.92})))
    client, gw = await gateway(config=routes(base_url, key_file, {"input": moderated()}))
    with pytest.raises(openai.BadRequestError) as refused:
        await ask(client, "how do I hurt someone")
    assert "guardrail 'policy' blocked the request: it found violence" in str(refused.value)
    (asked,) = fake.requests  # the moderation only
    assert asked["path"] == "/v1/moderations"
    assert asked["body"] == {"model": MODERATOR, "input": ["how do I hurt someone"]}
    assert asked["headers"]["Authorization"] == "Bearer sk-first-key"  # the route's key
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="policy", direction="input", action="block", entity="violence") == 1


@pytest.mark.parametrize(("settings", "result", "passes"), [
    ({}, scores({}), True),  # nothing flagged
    ({"categories": ["hate"]}, scores({"violence": 0.9}), True),  # not a chosen category
    ({"categories": ["hate", "violence"]}, scores({"violence": 0.9}), False),
    ({"scoreThreshold": 0.3}, scores({"harassment": 0.35}), False),  # below OpenAI's flag
    ({"scoreThreshold": 0.95}, scores({"violence": 0.9}), True),  # flagged, under ours
])
async def test_what_counts_is_the_chosen_categories_at_the_guards_threshold(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path,
        settings: dict[str, Any], result: dict[str, Any], passes: bool) -> None:
    fake, base_url = upstream
    fake.then(moderation(result), Reply(body=completion("gpt-5.5", "Sure.")))
    client, _ = await gateway(config=routes(base_url, key_file,
                                            {"input": moderated(**settings)}))
    try:
        answer = await ask(client, "a question")
    except openai.BadRequestError:
        answer = None
    assert (answer is not None) == passes


async def test_an_answer_is_moderated_before_the_client_sees_it(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(Reply(body=completion("gpt-5.5", "a hateful answer")),
              moderation(scores({"hate": 0.8})))
    client, _ = await gateway(config=routes(base_url, key_file, {"output": moderated()}))
    with pytest.raises(openai.BadRequestError) as refused:
        await ask(client, "a question")
    assert "guardrail 'policy'" in str(refused.value)
    assert "a hateful answer" not in str(refused.value)
    assert fake.requests[1]["body"]["input"] == ["a hateful answer"]


@pytest.mark.parametrize("reply", [
    Reply(status=500, body={"error": {"message": "down"}}),
    Reply(body={"results": []}),  # no result for the text sent
    Reply(body={"results": [{"flagged": True, "categories": "violence"}]}),
    Reply(body={"results": [{"categories": {"hate": True},
                             "category_scores": {"hate": "high"}}]}),
])
@pytest.mark.parametrize(("on_error", "status"), [("closed", 503), ("open", 200)])
async def test_an_endpoint_without_a_readable_answer_follows_on_error(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, reply: Reply,
        on_error: str, status: int) -> None:
    fake, base_url = upstream
    fake.then(reply)
    client, gw = await gateway(config=routes(base_url, key_file,
                                             {"input": moderated(on_error)}))
    resp = await client.post("/v1/chat/completions", json={
        "model": "gpt-5.5", "messages": [{"role": "user", "content": "a secret question"}]})
    assert resp.status == status
    if status == 503:
        error = (await resp.json())["error"]
        assert error["code"] == "guardrail_unavailable"
        assert f"guard 'policy': moderation {MODERATOR}: " in error["message"]
        assert "a secret question" not in error["message"]
    assert metric(gw, "llmop_gateway_guardrail_errors_total", route="gpt-5.5",
                  direction="input") == 1


async def test_the_moderation_api_reports_the_guards_categories_beside_pii(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    fake.then(moderation(scores({"hate": 0.7})))
    client, _ = await gateway(config=routes(base_url, key_file, {"input": [
        *moderated(categories=["hate", "violence"]),
        {"name": "no-pii", "action": "mask", "pii": {}}]}))
    async with sdk(client) as oai:
        result = await oai.moderations.create(model="gpt-5.5", input="mail jane@example.com")
    (only,) = result.results
    assert only.flagged
    # OpenAI's own categories are the SDK's fields, ours (pii) its extras
    assert (only.categories.hate, only.categories.violence) == (True, False)
    assert only.categories.model_extra == {"pii": True}
    assert only.category_scores.hate == pytest.approx(0.7)
    assert only.model_extra is not None
    assert [g["name"] for g in only.model_extra["llmop"]["guards"]] == ["policy", "no-pii"]


async def test_a_remote_model_without_guardrails_answers_the_moderation_api_itself(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    """How clients (and the MCP server, through a remote model's gateway) reach OpenAI's."""
    fake, base_url = upstream
    fake.then(moderation(scores({"violence": 0.9})))
    client, _ = await gateway(config=routes(base_url, key_file, None))
    async with sdk(client) as oai:
        result = await oai.moderations.create(model=MODERATOR, input="a text")
    assert result.results[0].categories.violence is True
    (asked,) = fake.requests
    assert (asked["path"], asked["body"]["input"]) == ("/v1/moderations", "a text")
    assert asked["headers"]["Authorization"] == "Bearer sk-first-key"


async def test_a_stream_is_moderated_as_it_comes_on_the_answer_so_far(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    pieces = ["A calm opening sentence, then more. ", "And a hateful second sentence."]
    fake.then(chunked(pieces), moderation(scores({})), moderation(scores({"hate": 0.8})))
    client, _ = await gateway(config=routes(base_url, key_file, {
        "output": moderated(), "streamJudgeWindowChars": 32}))
    received, error = await streamed_until_error(client, "a story")
    assert "guardrail 'policy' blocked the model's answer" in str(error)
    assert text_of(received) == [pieces[0]]  # the window moderated clean went out
    asked = [r["body"]["input"] for r in fake.requests if r["path"] == "/v1/moderations"]
    assert asked == [[pieces[0]], ["".join(pieces)]]
