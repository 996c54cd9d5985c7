"""OpenTelemetry traces of the gateway, as a collector receives them over OTLP/HTTP.

A retried request's trace: the caller's trace continued, admission, the queue wait with its
band, and one span per upstream attempt naming its replica and why it was retried; each
attempt passes its own context on to the engine (traceparent).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config
from llm_operator.profiles.tracing import Tracing, export_endpoint

from fake_upstream import FakeUpstream, Reply, sse_chunks
from otlp_receiver import Receiver, receiver

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def collector() -> AsyncIterator[Receiver]:
    async with receiver() as out:
        yield out


async def replica(fake: FakeUpstream, servers: list[TestServer]) -> str:
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    servers.append(server)
    return f"http://127.0.0.1:{server.port}/v1"


async def serve(doc: dict[str, Any]) -> tuple[TestClient[Any, Any], Gateway]:
    gw = Gateway(parse_config(doc), pick=lambda: 0.0)  # weighted: the first replica first
    client: TestClient[Any, Any] = TestClient(TestServer(gw.app(), host="127.0.0.1"))
    await client.start_server()
    return client, gw


async def test_a_retried_request_is_one_trace_with_each_attempts_replica(
        collector: Receiver) -> None:
    failing, answering = FakeUpstream().then(Reply(status=503, body={"error": "busy"})), \
        FakeUpstream()
    servers: list[TestServer] = []
    upstreams = [{"name": name, "baseUrl": await replica(fake, servers), "auth": "none",
                  "slots": 4} for name, fake in (("r0", failing), ("r1", answering))]
    client, _ = await serve({"tracing": {"endpoint": collector.url},
                             "routes": [{"name": "ns/m", "models": ["m"],
                                         "upstreams": upstreams}]})
    try:
        resp = await client.post("/v1/chat/completions", json=CHAT, headers={
            "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01",
            "x-gateway-inference-objective": "interactive"})
        assert resp.status == 200
    finally:
        await client.close()  # the gateway's cleanup exports what is batched
        for server in servers:
            await server.close()
    request = collector.named("POST /v1/chat/completions")[0]
    assert (request.trace_id, request.parent_id) == (CALLER_TRACE, CALLER_SPAN)
    assert request.attributes["http.response.status_code"] == 200
    assert request.service == "llmop-gateway"
    admission, queue = collector.named("llmop.admission")[0], collector.named("llmop.queue")[0]
    assert admission.parent_id == queue.parent_id == request.span_id
    assert admission.attributes["llmop.route"] == "ns/m"
    assert queue.attributes["llmop.band"] == "interactive"
    assert queue.attributes["llmop.queue.position"] == 0
    attempts = sorted(collector.named("llmop.upstream"), key=lambda s: s.attributes[
        "llmop.attempt"])
    assert [(a.attributes["llmop.upstream"], a.attributes.get("llmop.retry_reason"),
             a.status_code) for a in attempts] == [("r0", None, 2), ("r1", "503", 0)]
    assert attempts[0].status_message == "503"
    assert all(a.parent_id == request.span_id and a.trace_id == CALLER_TRACE
               for a in attempts)
    assert "first byte" in attempts[1].events
    # each attempt's own context went to its engine
    for fake, attempt in ((failing, attempts[0]), (answering, attempts[1])):
        sent = fake.requests[0]["headers"]["traceparent"]
        assert sent == f"00-{CALLER_TRACE}-{attempt.span_id}-01"


async def test_a_stream_records_when_its_first_token_went_out(collector: Receiver) -> None:
    servers: list[TestServer] = []
    fake = FakeUpstream()
    fake.then(Reply(chunks=sse_chunks("m", ["Hel", "lo"])))
    url = await replica(fake, servers)
    client, _ = await serve({"tracing": {"endpoint": collector.url},
                             "routes": [{"models": ["m"], "upstream": {
                                 "baseUrl": url, "auth": "none"}}]})
    try:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        await resp.read()
    finally:
        await client.close()
        for server in servers:
            await server.close()
    attempt = collector.named("llmop.upstream")[0]
    assert attempt.events == ["first byte", "first token sent"]
    assert "llmop.queue" not in [s.name for s in collector.spans]  # no slots known


async def test_tracing_is_off_unless_an_endpoint_is_set(collector: Receiver,
                                                        monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    gw = Gateway(parse_config({"routes": [{"models": ["m"], "upstream": {
        "baseUrl": "http://127.0.0.1:9/v1"}}]}))
    assert gw.traces is None


async def test_the_standard_variable_turns_tracing_on(collector: Receiver,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url.removesuffix("/v1/traces"))
    monkeypatch.setenv("OTEL_SERVICE_NAME", "front-door")
    servers: list[TestServer] = []
    url = await replica(FakeUpstream(), servers)
    client, gw = await serve({"routes": [{"models": ["m"], "upstream": {
        "baseUrl": url, "auth": "none"}}]})
    try:
        assert gw.traces is not None
        resp = await client.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 200
    finally:
        await client.close()
        for server in servers:
            await server.close()
    assert [s.service for s in collector.named("POST /v1/chat/completions")] == ["front-door"]


async def test_a_zero_ratio_records_only_traces_the_caller_sampled(
        collector: Receiver) -> None:
    servers: list[TestServer] = []
    url = await replica(FakeUpstream(), servers)
    client, _ = await serve({"tracing": {"endpoint": collector.url, "sampleRatio": 0},
                             "routes": [{"models": ["m"], "upstream": {
                                 "baseUrl": url, "auth": "none"}}]})
    try:
        for flags in ("00", "01"):
            resp = await client.post("/v1/chat/completions", json=CHAT, headers={
                "traceparent": f"00-{CALLER_TRACE[:-2]}{flags}-{CALLER_SPAN}-{flags}"})
            assert resp.status == 200
    finally:
        await client.close()
        for server in servers:
            await server.close()
    assert {s.trace_id for s in collector.spans} == {f"{CALLER_TRACE[:-2]}01"}


@pytest.mark.parametrize(("settings", "env", "endpoint"), [
    ({}, {}, None),
    ({"endpoint": "http://c:4318/v1/traces"}, {}, "http://c:4318/v1/traces"),
    ({}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
    ({}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/x"}, "http://t:4318/x"),
    ({}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:4318/x",
          "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://t:4318/x"),
    ({"endpoint": "http://s:4318/v1/traces"},
     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "http://s:4318/v1/traces"),
    ({"enabled": True}, {}, "http://localhost:4318/v1/traces"),
    ({"enabled": False}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, None),
    ({"endpoint": "http://s:4318/v1/traces"}, {"OTEL_SDK_DISABLED": "true"}, None),
], ids=["off-by-default", "settings", "base-env", "traces-env", "traces-env-wins",
        "settings-win", "enabled-default-endpoint", "disabled-in-settings", "sdk-disabled"])
def test_where_traces_go(settings: dict[str, Any], env: dict[str, str],
                         endpoint: str | None) -> None:
    assert export_endpoint(Tracing.model_validate(settings), env) == endpoint


async def test_each_guard_is_a_span_naming_what_it_found_never_the_text(
        collector: Receiver) -> None:
    servers: list[TestServer] = []
    fake = FakeUpstream()
    url = await replica(fake, servers)
    rails = {"input": [
        {"name": "no-cards", "action": "log", "pii": {"entities": ["CREDIT_CARD"]}},
        {"name": "no-pii", "action": "mask", "pii": {}}]}
    client, _ = await serve({"tracing": {"endpoint": collector.url}, "routes": [{
        "models": ["m"], "upstream": {"baseUrl": url, "auth": "none"}, "guardrails": rails}]})
    secret = "card 4111 1111 1111 1111, mail jo@example.com"
    try:
        resp = await client.post("/v1/chat/completions", json={
            **CHAT, "messages": [{"role": "user", "content": secret}]})
        assert resp.status == 200
    finally:
        await client.close()
        for server in servers:
            await server.close()
    admission = collector.named("llmop.admission")[0]
    guards = collector.named("llmop.guardrail")
    assert [(g.attributes["llmop.guard"], g.attributes["llmop.guard.found"])
            for g in guards] == [("no-cards", "CREDIT_CARD"),  # it logs: the card stays
                                 ("no-pii", "CREDIT_CARD,EMAIL_ADDRESS")]
    assert all(g.parent_id == admission.span_id for g in guards)
    # The whole card number, not a fragment: a loopback port such as 41117 is no leak.
    assert not any("4111 1111 1111" in str(s.attributes) or "jo@example" in str(s.attributes)
                   for s in collector.spans)
