"""A guard's calls cost what a client's request does: flow control, breakers, load, limits.

A guard model (a judge) is asked as any routed model is: its pool's flow control queues
the call as its caller's, its circuit breaker passes over a failing deployment, and the
call counts in the deployment's load. A /v1/moderations check takes a slot of the model's
pool as a chat request does. Through a real gateway on loopback and a fake upstream whose
answers the test holds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from guardtools import Upstream, judge_routes, judged, verdict

from llm_operator.gateway.flow.bands import OBJECTIVE_HEADER

from fake_upstream import Reply, completion
from gwtools import GatewayFactory

BANDS = {"bands": [{"name": "standard", "priority": 0},
                   {"name": "best-effort", "priority": -1, "sheddable": True}]}
CHAT = {"model": "gpt-5.5", "messages": [{"role": "user", "content": "Capital of France?"}]}
SHED = {OBJECTIVE_HEADER: "best-effort"}


def one_slot_judge(base_url: str, key_file: Path, **judge_route: Any) -> dict[str, Any]:
    """The judged model, and a judge route whose upstream serves one request at a time."""
    config = judge_routes(base_url, key_file, {"input": judged()})
    config["routes"][1]["upstream"]["slots"] = 1
    config["routes"][1].update(judge_route)
    return {**config, "flowControl": BANDS}


async def until(condition: Any) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0)


async def test_a_judge_call_holds_a_slot_of_the_judges_pool_and_counts_in_its_load(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    held = asyncio.Event()
    fake.then(Reply(body=verdict("safe").body, hold=held), verdict("safe"))
    client, gw = await gateway(config=one_slot_judge(base_url, key_file))
    first = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
    await until(lambda: len(fake.requests) == 1)
    (judge,) = gw.routes["guard"].deployments
    assert judge.load.in_flight == 1  # the judge's deployment is busy, as with any request
    second = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
    await until(lambda: gw.flow.queued("guard") == 1)  # its judge call waits its turn
    assert len(fake.requests) == 1
    held.set()
    answers = await asyncio.gather(first, second)
    assert [a.status for a in answers] == [200, 200]
    assert sorted(r["path"] for r in fake.requests) == [
        "/v1/chat/completions", "/v1/chat/completions", "/v1/completions", "/v1/completions"]
    assert judge.load.in_flight == 0


async def test_a_sheddable_callers_judge_call_is_refused_at_a_full_judge(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    held = asyncio.Event()
    fake.then(Reply(body=verdict("safe").body, hold=held))
    client, _ = await gateway(config=one_slot_judge(base_url, key_file))
    first = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
    await until(lambda: len(fake.requests) == 1)
    refused = await client.post("/v1/chat/completions", json=CHAT, headers=SHED)
    assert refused.status == 503
    error = (await refused.json())["error"]
    assert error["code"] == "guardrail_unavailable"
    assert "the judge model 'guard' is busy" in error["message"]
    assert "sheddable" in error["message"]
    assert len(fake.requests) == 1  # the judge was not asked for it
    held.set()
    assert (await first).status == 200


@pytest.mark.parametrize(("reply", "said"), [
    (Reply(status=500, body={"error": {"message": "down"}}), "HTTP 500"),
    # headers sent, then the connection dropped halfway through the body
    (Reply(body={"choices": [{"text": "safe " * 200}]}, drop_after=1), ": connect"),
], ids=["answers 500", "dies mid-answer"])
async def test_a_failing_judge_opens_its_circuit_and_is_then_passed_over_without_a_call(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path, reply: Reply,
        said: str) -> None:
    fake, base_url = upstream
    fake.then(reply, reply)
    client, gw = await gateway(config=one_slot_judge(
        base_url, key_file, circuitBreaker={"failureThreshold": 2, "openSeconds": 60}))
    messages = []
    for _ in range(3):
        answer = await client.post("/v1/chat/completions", json=CHAT)
        assert answer.status == 503
        messages.append((await answer.json())["error"]["message"])
    assert all(said in m for m in messages[:2]), messages
    assert "circuit_open" in messages[2], messages
    assert len(fake.requests) == 2  # the open circuit spared the judge the third call
    assert gw.routes["guard"].deployments[0].breaker.state.name == "OPEN"


@pytest.mark.parametrize(("headers", "status", "code"), [
    (SHED, 429, "request_shed"),  # a sheddable band: refused at once, as chat would be
    ({}, 200, None),  # the default band: waits its turn, then is checked
])
async def test_a_moderation_check_takes_a_slot_of_the_models_pool(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path,
        headers: dict[str, str], status: int, code: str | None) -> None:
    fake, base_url = upstream
    held = asyncio.Event()
    fake.then(Reply(body=completion("gpt-5.5"), hold=held))
    client, gw = await gateway(config={"flowControl": BANDS, "routes": [{
        "models": ["gpt-5.5"], "guardrails": {"input": [
            {"name": "no-pii", "action": "mask", "pii": {}}]},
        "upstream": {"baseUrl": base_url, "apiKey": {"file": str(key_file)}, "slots": 1}}]})
    chat = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
    await until(lambda: len(fake.requests) == 1)
    check = asyncio.create_task(client.post("/v1/moderations", headers=headers, json={
        "model": "gpt-5.5", "input": "mail jane@example.com"}))
    if status == 200:
        await until(lambda: gw.flow.queued("gpt-5.5") == 1)
        assert not check.done()
        held.set()
    answer = await check
    assert answer.status == status
    body = await answer.json()
    if code is None:
        assert body["results"][0]["categories"]["pii"] is True
    else:
        assert body["error"]["code"] == code
    held.set()
    assert (await chat).status == 200
