"""The gateway against a real fake upstream on loopback: the behaviours clients depend on."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import ConfigError, Route, parse_config

from fake_upstream import FakeUpstream, Reply, completion, sse_chunks
from gwtools import FakeTime, GatewayFactory, metric

Upstream = tuple[FakeUpstream, str]
CHAT = {"model": "gpt-5.5", "messages": [{"role": "user", "content": "Say hello"}]}


async def test_plain_completion_maps_model_and_injects_key(gateway: GatewayFactory,
                                                           upstream: Upstream) -> None:
    fake, _ = upstream
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json={**CHAT, "temperature": 0.2},
                             headers={"Authorization": "Bearer client-token"})
    assert resp.status == 200
    data = await resp.json()
    assert data["choices"][0]["message"]["content"] == "Hello!"
    seen = fake.requests[0]
    assert seen["body"] == {**CHAT, "temperature": 0.2, "model": "gpt-5.5-2026-04-23"}
    assert seen["headers"]["Authorization"] == "Bearer sk-first-key"  # not the client's token
    text = await resp.text()
    assert "sk-first-key" not in text and "sk-first-key" not in str(dict(resp.headers))


async def test_an_upstreams_cookie_never_reaches_another_request(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """Providers set cookies (Cloudflare's __cf_bm); one client's must not ride on the next's."""
    fake, _ = upstream
    fake.then(Reply(body=completion("gpt-5.5"),
                    headers={"Set-Cookie": "__cf_bm=client-a-session; Path=/; HttpOnly"}))
    # by name: an HTTP client keeps no cookies for a bare IP address anyway
    client, _ = await gateway({"upstream": {"baseUrl": upstream[1].replace("127.0.0.1",
                                                                           "localhost")}})
    first = await client.post("/v1/chat/completions", json=CHAT)
    assert first.status == 200 and "Set-Cookie" not in first.headers
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200
    assert "Cookie" not in fake.requests[1]["headers"]


async def test_alias_names_route_to_the_same_upstream(gateway: GatewayFactory,
                                                      upstream: Upstream) -> None:
    fake, _ = upstream
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "frontier"})
    assert resp.status == 200
    assert fake.requests[0]["body"]["model"] == "gpt-5.5-2026-04-23"


async def test_body_is_forwarded_byte_for_byte_when_no_mapping_is_needed(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, _ = await gateway({"upstream": {"baseUrl": upstream[1]}})
    body = {**CHAT, "tools": [{"type": "function", "function": {"name": "f"}}], "seed": 7}
    assert (await client.post("/v1/chat/completions", json=body)).status == 200
    assert fake.requests[0]["body"] == body
    assert "Authorization" not in fake.requests[0]["headers"]  # no key configured


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/embeddings", "/v1/responses"])
async def test_other_openai_endpoints_pass_through(gateway: GatewayFactory, upstream: Upstream,
                                                   path: str) -> None:
    fake, _ = upstream
    client, _ = await gateway()
    resp = await client.post(path, json={"model": "gpt-5.5", "input": "x"})
    assert resp.status == 200
    assert fake.requests[0]["path"] == path


async def test_streaming_is_relayed_chunk_by_chunk_with_usage(gateway: GatewayFactory,
                                                               upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Hel", "lo", "!"], usage=(7, 4))))
    client, gw = await gateway()
    resp = await client.post("/v1/chat/completions", json={
        **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    assert resp.status == 200 and resp.headers["Content-Type"] == "text/event-stream"
    events = [line for line in (await resp.text()).split("\n") if line.startswith("data:")]
    assert len(events) == 5 and events[-1] == "data: [DONE]"
    labels = {"route": "gpt-5.5"}
    assert metric(gw, "llmop_gateway_tokens_total", kind="prompt", **labels) == 7
    assert metric(gw, "llmop_gateway_tokens_total", kind="completion", **labels) == 4
    assert metric(gw, "llmop_gateway_time_to_first_token_seconds_count", **labels) == 1
    assert metric(gw, "llmop_gateway_requests_total", status="200", **labels) == 1


async def test_chunks_arrive_before_the_stream_ends(gateway: GatewayFactory,
                                                    upstream: Upstream) -> None:
    """No buffering: the first event is readable while the upstream is still generating."""
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["a", "b"]), chunk_gap=30))
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    first = await asyncio.wait_for(resp.content.readline(), timeout=5)
    assert first.startswith(b"data: ") and b'"a"' in first
    resp.close()


async def test_client_disconnect_cancels_the_upstream_stream(gateway: GatewayFactory,
                                                             upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", [str(i) for i in range(50)]), chunk_gap=0.05))
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    await asyncio.wait_for(resp.content.readline(), timeout=5)
    resp.close()
    await asyncio.wait_for(fake.stream_cancelled.wait(), timeout=5)


async def test_never_retries_once_a_stream_has_started(gateway: GatewayFactory,
                                                       upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["a", "b", "c"]), drop_after=2))
    client, _ = await gateway(time=FakeTime())
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    with pytest.raises(aiohttp.ClientPayloadError):
        await resp.read()
    assert len(fake.requests) == 1


async def test_an_answer_cut_short_is_a_502_not_the_gateways_fault(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    cut = Reply(chunks=[b'{"id": "chatcmpl-1", ', b'"choices": []}'], drop_after=1)
    fake.then(cut, cut, cut)  # each attempt (3 by default): the client had nothing yet
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 502 and resp.headers["x-llmop-attempts"] == "3"
    assert (await resp.json())["error"]["code"] == "upstream_connect"
    assert resp.headers["x-llmop-upstream"]


async def test_key_rotation_takes_effect_without_restart(gateway: GatewayFactory,
                                                         upstream: Upstream,
                                                         key_file: Path) -> None:
    fake, _ = upstream
    client, _ = await gateway()
    await client.post("/v1/chat/completions", json=CHAT)
    key_file.write_text("sk-rotated-key-2\n")
    stat = key_file.stat()
    os.utime(key_file, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    await client.post("/v1/chat/completions", json=CHAT)
    assert [r["headers"]["Authorization"] for r in fake.requests] == [
        "Bearer sk-first-key", "Bearer sk-rotated-key-2"]


@pytest.mark.parametrize(("auth", "header", "value"), [
    ("x-api-key", "x-api-key", "sk-first-key"),
    ("x-goog-api-key", "x-goog-api-key", "sk-first-key"),
])
async def test_native_auth_headers(gateway: GatewayFactory, upstream: Upstream, key_file: Path,
                                   auth: str, header: str, value: str) -> None:
    fake, base = upstream
    client, _ = await gateway({"upstream": {"baseUrl": base, "auth": auth,
                                            "apiKey": {"file": str(key_file)},
                                            "headers": {"anthropic-version": "2023-06-01"}}})
    await client.post("/v1/chat/completions", json=CHAT)
    headers = fake.requests[0]["headers"]
    assert headers[header] == value and "Authorization" not in headers
    assert headers["anthropic-version"] == "2023-06-01"


@pytest.mark.parametrize(("retry", "status", "tries", "slept"), [
    ({}, 200, 2, [2.0]),  # by default a 429 is retried after its Retry-After
    ({"onRateLimit": False}, 429, 1, []),  # passed on at once (llmop up's local engines)
])
async def test_a_429_is_retried_after_its_retry_after_unless_the_route_says_not(
        gateway: GatewayFactory, upstream: Upstream, retry: dict[str, Any], status: int,
        tries: int, slept: list[float]) -> None:
    fake, _ = upstream
    fake.then(Reply(status=429, body={"error": {"message": "slow down"}},
                    headers={"Retry-After": "2"}))
    time = FakeTime()
    client, gw = await gateway({"retry": retry}, time=time)
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == status and len(fake.requests) == tries
    assert time.slept == slept
    assert metric(gw, "llmop_gateway_retries_total", route="gpt-5.5") == tries - 1
    assert metric(gw, "llmop_gateway_upstream_errors_total", route="gpt-5.5", reason="429") == 1


async def test_5xx_retries_back_off_exponentially_then_give_up(gateway: GatewayFactory,
                                                               upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(*[Reply(status=503, body={"error": {"message": "overloaded"}})] * 3)
    time = FakeTime()
    client, gw = await gateway({"retry": {"attempts": 3, "backoffInitialSeconds": 0.5}},
                               time=time)
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503
    assert (await resp.json())["error"]["message"] == "overloaded"  # upstream's body relayed
    assert len(fake.requests) == 3 and time.slept == [0.5, 1.0]
    assert metric(gw, "llmop_gateway_retries_total", route="gpt-5.5") == 2


async def test_retries_stop_at_the_deadline(gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(status=429, body={}, headers={"Retry-After": "120"}))
    client, _ = await gateway({"timeouts": {"requestSeconds": 60}}, time=FakeTime())
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 429 and len(fake.requests) == 1


async def test_non_retryable_errors_pass_through_once(gateway: GatewayFactory,
                                                      upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(status=400, body={"error": {"message": "bad temperature"}}))
    client, _ = await gateway(time=FakeTime())
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 400 and len(fake.requests) == 1


async def test_upstream_timeout_is_a_504(gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(body=completion("m"), delay=30))
    client, _ = await gateway({"timeouts": {"requestSeconds": 0.3}, "retry": {"attempts": 1}})
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 504
    assert (await resp.json())["error"]["code"] == "upstream_timeout"


async def test_unreachable_upstream_opens_the_circuit(gateway: GatewayFactory) -> None:
    dead = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    time = FakeTime()
    client, gw = await gateway({"upstream": {"baseUrl": dead},
                                "retry": {"attempts": 2},
                                "circuitBreaker": {"failureThreshold": 2, "openSeconds": 30}},
                               time=time)
    first = await client.post("/v1/chat/completions", json=CHAT)
    assert first.status == 502 and (await first.json())["error"]["code"] == "upstream_connect"
    fast = await client.post("/v1/chat/completions", json=CHAT)
    assert fast.status == 503 and fast.headers["Retry-After"] == "30"
    assert (await fast.json())["error"]["code"] == "circuit_open"
    metrics = await (await client.get("/metrics")).text()
    assert 'llmop_gateway_circuit_state{route="gpt-5.5",upstream="127.0.0.1:9"} 2.0' in metrics
    time.now += 31  # half-open: one trial goes through (and fails again)
    trial = await client.post("/v1/chat/completions", json=CHAT)
    assert trial.status == 502
    assert metric(gw, "llmop_gateway_upstream_errors_total", route="gpt-5.5",
                  reason="circuit_open") == 1


async def test_rate_limit_answers_429_with_retry_after(gateway: GatewayFactory) -> None:
    time = FakeTime()
    client, gw = await gateway({"rateLimit": {"requestsPerMinute": 2}}, time=time)
    statuses = [(await client.post("/v1/chat/completions", json=CHAT)).status for _ in range(2)]
    refused = await client.post("/v1/chat/completions", json=CHAT)
    assert statuses == [200, 200] and refused.status == 429
    assert refused.headers["Retry-After"] == "30"
    assert (await refused.json())["error"]["type"] == "rate_limit_error"
    assert metric(gw, "llmop_gateway_rate_limited_total", route="gpt-5.5") == 1
    time.now += 30
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200


async def test_tokens_per_minute_limit_counts_real_usage(gateway: GatewayFactory) -> None:
    time = FakeTime()
    client, _ = await gateway({"rateLimit": {"tokensPerMinute": 14}}, time=time)
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200  # 14 tokens
    refused = await client.post("/v1/chat/completions", json=CHAT)
    assert refused.status == 429


@pytest.mark.parametrize(("body", "status", "code"), [
    (b"{not json", 400, "invalid_json"),
    (b'{"messages": []}', 400, "missing_model"),
    (b'["a"]', 400, "missing_model"),
    (b'{"model": "gpt-4"}', 404, "model_not_found"),
])
async def test_bad_requests_get_openai_errors(gateway: GatewayFactory, upstream: Upstream,
                                              body: bytes, status: int, code: str) -> None:
    fake, _ = upstream
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", data=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status == status
    error = (await resp.json())["error"]
    assert error["code"] == code and error["message"]
    assert fake.requests == []


async def test_unknown_model_lists_the_known_ones(gateway: GatewayFactory) -> None:
    client, _ = await gateway()
    resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "gpt-4"})
    assert "available models: frontier, gpt-5.5" in (await resp.json())["error"]["message"]


async def test_oversized_body_is_refused(gateway: GatewayFactory, upstream: Upstream) -> None:
    client, _ = await gateway(config={"maxRequestBytes": 2048})
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 4096}]}
    resp = await client.post("/v1/chat/completions", json=big)
    assert resp.status == 413
    assert (await resp.json())["error"]["code"] == "request_too_large"
    assert upstream[0].requests == []


async def test_models_health_and_readiness(gateway: GatewayFactory, key_file: Path) -> None:
    client, _ = await gateway()
    models = await (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["gpt-5.5", "frontier"]
    assert (await client.get("/health")).status == 200
    assert (await client.get("/ready")).status == 200
    key_file.unlink()
    not_ready = await client.get("/ready")
    assert not_ready.status == 503
    assert str(key_file) in (await not_ready.json())["problems"][0]


async def test_missing_key_is_a_clear_503_without_secrets(gateway: GatewayFactory,
                                                          key_file: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    client, _ = await gateway()
    key_file.write_text("")
    os.utime(key_file, ns=(1, 1))
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503
    assert (await resp.json())["error"]["code"] == "credentials_unavailable"


async def test_prompt_tokens_from_the_engines_prefix_cache_are_counted_as_it_reports_them(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """llama-server and vLLM say in usage how much of a prompt came from their prefix
    cache (prompt_tokens_details.cached_tokens): plain and streamed answers alike."""
    fake, _ = upstream
    plain = completion("gpt-5.5", prompt=100)
    plain["usage"]["prompt_tokens_details"] = {"cached_tokens": 96}
    streamed = [c.replace(b'"completion_tokens": 4}', b'"completion_tokens": 4, '
                          b'"prompt_tokens_details": {"cached_tokens": 5}}')
                for c in sse_chunks("gpt-5.5", ["Hi"], usage=(7, 4))]
    fake.then(Reply(body=plain), Reply(chunks=streamed), Reply(body=completion("gpt-5.5")))
    client, gw = await gateway()
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200
    resp = await client.post("/v1/chat/completions", json={
        **CHAT, "stream": True, "stream_options": {"include_usage": True}})
    await resp.read()
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200  # no details
    route = {"route": "gpt-5.5"}
    assert metric(gw, "llmop_gateway_tokens_total", kind="prompt", **route) == 100 + 7 + 11
    assert metric(gw, "llmop_gateway_cached_prompt_tokens_total", **route) == 96 + 5


async def test_metrics_count_requests_tokens_and_cost(gateway: GatewayFactory) -> None:
    client, gw = await gateway()
    for _ in range(3):
        await client.post("/v1/chat/completions", json=CHAT)
    await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"})
    route = {"route": "gpt-5.5"}
    assert metric(gw, "llmop_gateway_requests_total", status="200", **route) == 3
    assert metric(gw, "llmop_gateway_requests_total", route="none", status="404") == 1
    assert metric(gw, "llmop_gateway_tokens_total", kind="prompt", **route) == 33
    assert metric(gw, "llmop_gateway_tokens_total", kind="completion", **route) == 9
    assert metric(gw, "llmop_gateway_cost_usd_total", **route) == pytest.approx(
        (33 * 5 + 9 * 30) / 1e6)
    assert metric(gw, "llmop_gateway_request_duration_seconds_count", **route) == 3
    exposition = await (await client.get("/metrics")).text()
    assert "sk-first-key" not in exposition


async def test_prompts_and_keys_never_reach_the_logs(gateway: GatewayFactory,
                                                     upstream: Upstream,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    fake, _ = upstream
    fake.then(*[Reply(status=503, body={})] * 3)
    caplog.set_level(logging.DEBUG)
    client, _ = await gateway(time=FakeTime())
    secret_prompt: dict[str, Any] = {**CHAT, "messages": [{"role": "user",
                                                           "content": "my SSN is 078-05-1120"}]}
    await client.post("/v1/chat/completions", json=secret_prompt)
    assert "078-05-1120" not in caplog.text and "sk-first-key" not in caplog.text


async def test_reconfigure_adds_and_removes_routes_without_a_restart(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, base_url = upstream
    client, gw = await gateway()
    gw.reconfigure(parse_config({"routes": [
        {"models": ["gemma-3-270m"], "upstream": {"baseUrl": base_url, "auth": "none"}}]}))
    models = await (await client.get("/v1/models")).json()
    assert [m["id"] for m in models["data"]] == ["gemma-3-270m"]
    resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "gemma-3-270m"})
    assert resp.status == 200
    assert "Authorization" not in fake.requests[-1]["headers"]
    gone = await client.post("/v1/chat/completions", json=CHAT)
    assert gone.status == 404
    assert "available models: gemma-3-270m" in (await gone.json())["error"]["message"]


async def test_reconfigure_keeps_an_open_circuit_for_the_same_upstream(
        gateway: GatewayFactory) -> None:
    dead = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    client, gw = await gateway({"upstream": {"baseUrl": dead},
                                "circuitBreaker": {"failureThreshold": 1},
                                "retry": {"attempts": 1}})
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 502
    gw.reconfigure(parse_config({"routes": [
        {"models": ["gpt-5.5"], "upstream": {"baseUrl": dead}}]}))
    again = await client.post("/v1/chat/completions", json=CHAT)
    assert (again.status, (await again.json())["error"]["code"]) == (503, "circuit_open")


async def test_an_unavailable_route_answers_503_with_the_reason(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await gateway({"name": "gpt"})
    gw.set_unavailable("gpt", "loading the model (phase Starting)")
    resp = await client.post("/v1/chat/completions", json=CHAT)
    assert resp.status == 503
    assert resp.headers["Retry-After"] == "5"
    error = (await resp.json())["error"]
    assert error["code"] == "model_unavailable"
    assert error["message"] == "'gpt-5.5' cannot serve right now: loading the model (phase " \
        "Starting)"
    assert fake.requests == []
    gw.set_unavailable("gpt", None)
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200


async def test_a_route_marked_unavailable_while_its_request_retries_answers_503_not_502(
        gateway: GatewayFactory) -> None:
    """`llmop up`: a model process dies, the request finds its port closed, and the
    runtime marks it unavailable a moment later, while the gateway waits to retry."""
    marked: list[Gateway] = []

    class Meanwhile(FakeTime):
        async def sleep(self, seconds: float) -> None:  # the runtime marks it in the backoff
            await super().sleep(seconds)
            marked[0].set_unavailable("gpt", "it is failed on this machine (killed by SIGKILL)")

    time = Meanwhile()
    client, gw = await gateway({"name": "gpt", "upstream": {"baseUrl": "http://127.0.0.1:9/v1"},
                                "retry": {"attempts": 3}}, time=time)
    marked.append(gw)
    resp = await client.post("/v1/chat/completions", json=CHAT)
    error = (await resp.json())["error"]
    assert (resp.status, error["code"]) == (503, "model_unavailable")
    assert resp.headers["Retry-After"] == "5"
    assert len(time.slept) == 1


async def cancelled_by_client(client: Any, fake: FakeUpstream, body: dict[str, Any]) -> None:
    """Send ``body``, then go away once the upstream has it; return when the gateway let go."""
    fake.cancelled.clear()
    fake.received.clear()
    sent = asyncio.create_task(client.post("/v1/chat/completions", json=body))
    await asyncio.wait_for(fake.received.wait(), 5)
    sent.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sent
    await asyncio.wait_for(fake.cancelled.wait(), 5)


async def test_a_trial_cancelled_by_its_client_does_not_wedge_the_circuit(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """Half-open lets one trial through; if its client goes away, the next one may try."""
    fake, _ = upstream
    time = FakeTime()
    client, _ = await gateway({"retry": {"attempts": 1},
                               "circuitBreaker": {"failureThreshold": 1, "openSeconds": 30}},
                              time=time)
    fake.then(Reply(status=500, body={"error": {"message": "boom"}}))
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 500
    time.now += 31  # half-open
    fake.then(Reply(body=completion("m"), delay=30))
    await cancelled_by_client(client, fake, {**CHAT, "tag": "trial"})
    after = await client.post("/v1/chat/completions", json=CHAT)
    assert after.status == 200  # was 503 circuit_open for good


async def test_a_failing_model_does_not_open_the_circuit_of_another_on_the_same_host(
        gateway: GatewayFactory, upstream: Upstream, key_file: Path) -> None:
    fake, base_url = upstream
    other = {"name": "other", "models": ["other"],
             "upstream": {"baseUrl": base_url, "apiKey": {"file": str(key_file)}},
             "circuitBreaker": {"failureThreshold": 5}}
    client, _ = await gateway(config={"routes": [
        {"models": ["gpt-5.5"], "upstream": {"baseUrl": base_url}, "retry": {"attempts": 1},
         "circuitBreaker": {"failureThreshold": 1}}, other]})
    fake.then(Reply(status=500, body={}))
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 500
    shut = await client.post("/v1/chat/completions", json=CHAT)
    assert (await shut.json())["error"]["code"] == "circuit_open"
    fine = await client.post("/v1/chat/completions", json={**CHAT, "model": "other"})
    assert fine.status == 200
    metrics = await (await client.get("/metrics")).text()
    host = base_url.split("/")[2]
    assert f'llmop_gateway_circuit_state{{route="gpt-5.5",upstream="{host}"}} 2.0' in metrics
    assert f'llmop_gateway_circuit_state{{route="other",upstream="{host}"}} 0.0' in metrics


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/v1/chat/completions", b"[" * 100_000, 400, "invalid_json"),
    ("GET", "/v1/chat/completions", None, 405, "method_not_allowed"),
    ("POST", "/v1/audio/speech", b"{}", 404, "unknown_endpoint"),
    ("GET", "/nowhere", None, 404, "unknown_endpoint"),
])
async def test_every_error_is_openai_shaped(gateway: GatewayFactory, method: str, path: str,
                                           body: bytes | None, status: int, code: str) -> None:
    client, _ = await gateway()
    resp = await client.request(method, path, data=body,
                                headers={"Content-Type": "application/json"})
    assert resp.status == status
    assert resp.headers["Content-Type"].startswith("application/json")
    error = (await resp.json())["error"]
    assert error["code"] == code and error["message"]


@pytest.mark.parametrize(("reply", "stream"), [
    (Reply(body=completion("m"), delay=30), False),
    # the gateway reads a stream's first event before it answers: gone before it came
    (Reply(chunks=sse_chunks("m", ["a"]), opening_delay=30), True),
], ids=["plain", "stream before its first event"])
async def test_a_request_its_client_abandons_is_counted(gateway: GatewayFactory,
                                                        upstream: Upstream, reply: Reply,
                                                        stream: bool) -> None:
    fake, _ = upstream
    client, gw = await gateway()
    fake.then(reply)
    await cancelled_by_client(client, fake, {**CHAT, "tag": "gone", "stream": stream})
    assert metric(gw, "llmop_gateway_requests_total", route="gpt-5.5", status="499") == 1


async def test_a_stream_its_client_abandons_midway_is_counted_once(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """The stream counts itself as it ends; the path, cancelled with it, counts nothing."""
    fake, _ = upstream
    client, gw = await gateway()
    fake.then(Reply(chunks=sse_chunks("m", ["a", "b"]), chunk_gap=30))
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    assert resp.status == 200
    assert await resp.content.readany()  # the first event came
    resp.close()  # the client goes away
    await asyncio.wait_for(fake.stream_cancelled.wait(), 5)  # the gateway let go upstream
    async with asyncio.timeout(5):  # until the stream counted itself (and, in the same
        # step of the handler's cancellation, the path would have counted it again)
        while metric(gw, "llmop_gateway_requests_total", route="gpt-5.5",
                     status="499") is None:
            await asyncio.sleep(0.01)
    assert metric(gw, "llmop_gateway_requests_total", route="gpt-5.5", status="499") == 1


async def test_tokens_are_reserved_before_the_request_so_a_burst_cannot_overrun(
        gateway: GatewayFactory, upstream: Upstream) -> None:
    """10 concurrent requests of 1 + 5 tokens each against 20 TPM: at most 3 may go."""
    fake, _ = upstream
    for _ in range(10):
        fake.then(Reply(body=completion("m", prompt=1, completion_tokens=5), delay=0.05))
    client, _ = await gateway({"rateLimit": {"tokensPerMinute": 20}})
    body = {"model": "gpt-5.5", "max_tokens": 5, "messages": [{"role": "user",
                                                               "content": "hi"}]}
    statuses = await asyncio.gather(*(client.post("/v1/chat/completions", json=body)
                                      for _ in range(10)))
    assert sorted(r.status for r in statuses) == [200] * 3 + [429] * 7


async def test_an_unsettled_reservation_is_given_back(gateway: GatewayFactory,
                                                      upstream: Upstream) -> None:
    fake, _ = upstream
    time = FakeTime()
    client, _ = await gateway({"rateLimit": {"tokensPerMinute": 20}, "retry": {"attempts": 1}},
                              time=time)
    body = {"model": "gpt-5.5", "max_tokens": 15, "messages": [{"role": "user",
                                                                "content": "hi"}]}
    fake.then(Reply(status=400, body={"error": {"message": "bad"}}))
    assert (await client.post("/v1/chat/completions", json=body)).status == 400
    assert (await client.post("/v1/chat/completions", json=body)).status == 200


@pytest.mark.parametrize("client_asks", [False, True])
async def test_streams_always_count_usage_and_show_it_only_when_asked(
        gateway: GatewayFactory, upstream: Upstream, client_asks: bool) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Hel", "lo"], usage=(7, 4))))
    client, gw = await gateway()
    body: dict[str, Any] = {**CHAT, "stream": True}
    if client_asks:
        body["stream_options"] = {"include_usage": True}
    resp = await client.post("/v1/chat/completions", json=body)
    events = [line for line in (await resp.text()).split("\n") if line.startswith("data:")]
    assert fake.requests[0]["body"]["stream_options"] == {"include_usage": True}
    assert any('"usage"' in e for e in events) == client_asks
    assert events[-1] == "data: [DONE]" and len(events) == (4 if client_asks else 3)
    assert metric(gw, "llmop_gateway_tokens_total", kind="completion", route="gpt-5.5") == 4


@pytest.mark.parametrize(("key", "value"), [
    ("maxRequestBytes", 2048),
    ("listen", {"host": "127.0.0.1", "port": 9999}),
    ("tracing", {"sampleRatio": 0.5}),
])
def test_a_setting_read_at_start_keeps_its_value_and_a_change_says_restart(
        key: str, value: Any, caplog: pytest.LogCaptureFixture) -> None:
    route = {"models": ["m"], "upstream": {"baseUrl": "http://127.0.0.1:9/v1", "auth": "none"}}
    gw = Gateway(parse_config({"routes": [route]}))
    first = gw.config.model_dump(by_alias=True)[key]
    caplog.set_level(logging.WARNING)
    gw.reconfigure(parse_config({"routes": [route, {**route, "models": ["n"]}], key: value}))
    assert sorted(gw.routes) == ["m", "n"]  # the routes change
    assert gw.config.model_dump(by_alias=True)[key] == first  # this one does not
    assert f"gateway config: {key} changed, but the gateway reads it only at start" \
        in caplog.text


def test_a_route_set_changes_the_routes_and_keeps_every_setting() -> None:
    """The router and `llmop up` hand over typed routes; their settings stay the gateway's."""
    route = Route.model_validate({"models": ["m"], "upstream": {
        "baseUrl": "http://127.0.0.1:9/v1", "auth": "none"}})
    gw = Gateway(parse_config({"routes": [], "maxHeld": 7, "maxRequestBytes": 4096,
                               "flowControl": {"bands": [{"name": "only", "priority": 0}],
                                               "defaultBand": "only"}},
                              empty_ok=True))
    before = gw.config.model_dump(exclude={"routes"})
    gw.set_routes([route, route.model_copy(update={"models": ["n"]})])
    assert sorted(gw.routes) == ["m", "n"]
    assert gw.config.model_dump(exclude={"routes"}) == before
    with pytest.raises(ConfigError, match=r"routes\[1\]: model 'm' is already routed"):
        gw.set_routes([route, route])
    assert sorted(gw.routes) == ["m", "n"]  # a refused set changes nothing
