"""Several upstreams per route: traffic by weight, failover within the deadline, never after
a stream started; the answer says which upstream served it and after how many attempts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config

from fake_upstream import FakeUpstream, Reply, completion, sse_chunks
from gwtools import FakeTime, GatewayFactory, metric
from redisserver import free_port

CHAT = {"model": "gpt-5.5", "messages": [{"role": "user", "content": "Say hello"}]}
Upstream = tuple[FakeUpstream, str]


@pytest.fixture
async def backup() -> AsyncIterator[Upstream]:
    fake = FakeUpstream()
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    yield fake, f"http://127.0.0.1:{server.port}/v1"
    await server.close()


def two(primary: str, secondary: str, **route: Any) -> dict[str, Any]:
    """A route over two deployments; the primary is drawn first (weight 1000 to 1)."""
    return {"upstream": None, "upstreams": [
        {"name": "primary", "baseUrl": primary, "weight": 1000, "model": "gpt-5.5-primary"},
        {"name": "backup", "baseUrl": secondary, "weight": 0.001,
         "model": "gpt-5.5-backup"}], **route}


@pytest.mark.parametrize("failure", [
    Reply(status=503, body={"error": {"message": "overloaded"}}),
    Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "30"}),
    Reply(status=502, body={}),
])
async def test_a_failing_upstream_hands_the_request_to_the_next_at_once(
        gateway: GatewayFactory, upstream: Upstream, backup: Upstream, failure: Reply) -> None:
    (first, primary), (second, secondary) = upstream, backup
    first.then(failure)
    time = FakeTime()
    client, gw = await gateway(two(primary, secondary, retry={"onRateLimit": False}),
                               time=time)
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200
    assert (resp.headers["x-llmop-upstream"], resp.headers["x-llmop-attempts"]) == \
        ("backup", "2")
    assert [r["body"]["model"] for r in first.requests + second.requests] == \
        ["gpt-5.5-primary", "gpt-5.5-backup"]  # each deployment gets its own model id
    assert time.slept == []  # no backoff between deployments
    assert metric(gw, "llmop_gateway_failovers_total", route="gpt-5.5") == 1


async def test_an_unreachable_upstream_is_skipped(gateway: GatewayFactory,
                                                  backup: Upstream) -> None:
    second, secondary = backup
    client, _ = await gateway(two(f"http://127.0.0.1:{free_port()}/v1", secondary))
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200 and resp.headers["x-llmop-upstream"] == "backup"
    assert len(second.requests) == 1


async def test_an_open_circuit_is_passed_over_without_a_call(
        gateway: GatewayFactory, upstream: Upstream, backup: Upstream) -> None:
    (first, primary), (second, secondary) = upstream, backup
    first.then(Reply(status=500, body={}))
    client, _ = await gateway(two(primary, secondary,
                                  circuitBreaker={"failureThreshold": 1, "openSeconds": 60}))
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 500  # not retried
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200
    assert (resp.headers["x-llmop-upstream"], resp.headers["x-llmop-attempts"]) == \
        ("backup", "1")
    assert len(first.requests) == 1 and len(second.requests) == 1


async def test_when_every_upstream_fails_the_last_answer_is_relayed(
        gateway: GatewayFactory, upstream: Upstream, backup: Upstream) -> None:
    (first, primary), (second, secondary) = upstream, backup
    first.then(*[Reply(status=503, body={"error": {"message": "down"}})] * 3)
    second.then(*[Reply(status=503, body={"error": {"message": "down"}})] * 3)
    time = FakeTime()
    client, _ = await gateway(two(primary, secondary, retry={"attempts": 3}), time=time)
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503 and resp.headers["x-llmop-attempts"] == "3"
    assert (len(first.requests), len(second.requests)) == (2, 1)  # primary, backup, primary
    assert len(time.slept) == 1  # one backoff: on coming back round to the primary


async def test_a_started_stream_is_never_moved(gateway: GatewayFactory, upstream: Upstream,
                                               backup: Upstream) -> None:
    (first, primary), (second, secondary) = upstream, backup
    first.then(Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"]), drop_after=2))
    client, _ = await gateway(two(primary, secondary))
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status == 200 and resp.headers["x-llmop-upstream"] == "primary"
    with pytest.raises(aiohttp.ClientPayloadError):  # cut, as the upstream cut it
        await resp.read()
    assert second.requests == []


@pytest.mark.parametrize(("case", "reply", "request_fields", "route_fields"), [
    ("a plain answer cut short", Reply(body=completion("gpt-5.5-primary"), drop_after=0),
     {}, {}),
    ("a plain answer streamed upstream, cut mid-answer",
     Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"]), drop_after=2), {},
     {"streamUpstream": True}),
    ("a plain answer streamed upstream, ended cleanly before its [DONE]",  # a pool member
     Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"], usage=None)[:2]), {},  # unloaded
     {"streamUpstream": True}),
    ("a stream that dies before its first event",
     Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"]), drop_after=0), {"stream": True}, {}),
])
async def test_an_upstream_that_dies_before_the_client_got_a_byte_hands_the_request_on(
        gateway: GatewayFactory, upstream: Upstream, backup: Upstream, case: str,
        reply: Reply, request_fields: dict[str, Any], route_fields: dict[str, Any]) -> None:
    """A replica killed mid-answer costs the client nothing while nothing reached it."""
    (first, primary), (second, secondary) = upstream, backup
    first.then(reply)
    if route_fields:
        second.then(Reply(chunks=sse_chunks("gpt-5.5", ["Hello", "!"])))
    client, gw = await gateway(two(primary, secondary, **route_fields))
    resp = await client.post("/v1/chat/completions", json={**CHAT, **request_fields})
    body = await resp.read()
    assert resp.status == 200, (case, body)
    assert (resp.headers["x-llmop-upstream"], resp.headers["x-llmop-attempts"]) == \
        ("backup", "2"), case
    assert b"Hello" in body, case
    assert (len(first.requests), len(second.requests)) == (1, 1)
    assert metric(gw, "llmop_gateway_failovers_total", route="gpt-5.5") == 1


async def test_a_collected_stream_whose_last_event_lacks_its_blank_line_is_whole(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    first, primary = upstream
    chunks = sse_chunks("gpt-5.5", ["Hello", "!"])
    first.then(Reply(chunks=[*chunks[:-1], b"data: [DONE]"]))  # the server's last bytes
    client, _ = await gateway({"upstream": {"baseUrl": primary}, "streamUpstream": True})
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["choices"][0]["message"]["content"] == "Hello!"


async def test_an_answer_cut_short_on_every_attempt_says_so(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    first, primary = upstream
    cut = Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"]), drop_after=1)
    first.then(cut, cut, cut)
    client, _ = await gateway({"upstream": {"baseUrl": primary}, "streamUpstream": True,
                               "retry": {"attempts": 2}}, time=FakeTime())
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502 and resp.headers["x-llmop-attempts"] == "2"
    error = (await resp.json())["error"]
    assert error["message"] == "upstream of 'gpt-5.5' failed while it answered (connect) after " \
        "2 attempt(s)", error
    assert len(first.requests) == 2


async def test_traffic_splits_by_weight(upstream: Upstream, backup: Upstream) -> None:
    (first, primary), (second, secondary) = upstream, backup
    config = parse_config({"routes": [{"models": ["gpt-5.5"], "upstreams": [
        {"name": "a", "baseUrl": primary, "weight": 3},
        {"name": "b", "baseUrl": secondary, "weight": 1}]}]})
    gw = Gateway(config, pick=random.Random(7).random)
    client: TestClient[Any, Any] = TestClient(TestServer(gw.app(), host="127.0.0.1"))
    await client.start_server()
    try:
        served = Counter([(await client.post("/v1/chat/completions", json=CHAT))
                          .headers["x-llmop-upstream"] for _ in range(400)])
    finally:
        await client.close()
    assert 270 <= served["a"] <= 330 and served["a"] + served["b"] == 400
    assert (len(first.requests), len(second.requests)) == (served["a"], served["b"])


@pytest.mark.parametrize(("route", "message"), [
    ({"upstreams": [{"baseUrl": "http://a/v1"}, {"baseUrl": "http://a/v1"}]},
     "two share a name"),
    ({"upstreams": [{"baseUrl": "http://a/v1"}], "upstream": {"baseUrl": "http://b/v1"}},
     "set exactly one of upstream or upstreams"),
    ({"upstreams": []}, "upstreams: add at least one \\(an empty list needs hold\\)"),
    ({"upstreams": [{"baseUrl": "http://a/v1", "weight": 0}]}, "greater than 0"),
])
def test_bad_upstream_lists_name_the_problem(route: dict[str, Any], message: str) -> None:
    from llm_operator.gateway.settings.config import ConfigError  # noqa: PLC0415

    with pytest.raises(ConfigError, match=message):
        parse_config({"routes": [{"models": ["m"], **route}]})


async def test_a_stream_that_dies_before_its_first_event_on_every_attempt_is_counted_once(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """The stream never began, so it counts nothing itself: the error is counted as any."""
    first, primary = upstream
    dead = Reply(chunks=sse_chunks("gpt-5.5", ["a", "b"]), drop_after=0)
    first.then(dead, dead)
    client, gw = await gateway({"upstream": {"baseUrl": primary}, "retry": {"attempts": 2}},
                               time=FakeTime())
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status == 502, await resp.text()
    assert metric(gw, "llmop_gateway_requests_total", route="gpt-5.5", status="502") == 1
