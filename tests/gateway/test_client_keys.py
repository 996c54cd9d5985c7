"""Client keys at the gateway: who may call, which models, how often, for how much."""

from __future__ import annotations

import datetime as dt
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
CHAT = {"model": "gpt-5.5", "messages": [{"role": "user", "content": "Say hello"}]}
SEARCH, BATCH = "sk-llmop-search-team-key", "sk-llmop-batch-team-key"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def keys_file(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    write_keys(path, [{"id": "search", "sha256": digest(SEARCH)},
                      {"id": "batch", "sha256": digest(BATCH), "models": ["frontier"],
                       "requestsPerMinute": 2}])
    return path


def write_keys(path: Path, keys: list[dict[str, Any]]) -> None:
    path.write_text(yaml.safe_dump({"keys": keys}))


async def keyed(gateway: GatewayFactory, keys_file: Path, **config: Any) -> Any:
    return await gateway(config={"clientKeys": {"file": str(keys_file)}, **config})


@pytest.mark.parametrize(("headers", "status", "code"), [
    ({}, 401, "missing_api_key"),
    ({"Authorization": "Basic c2VhcmNoOng="}, 401, "missing_api_key"),
    (bearer("sk-llmop-unknown"), 401, "invalid_api_key"),
    (bearer(digest(SEARCH)), 401, "invalid_api_key"),  # the stored digest opens nothing
    (bearer(SEARCH), 200, None),
    ({"x-api-key": SEARCH}, 200, None),  # Anthropic-style clients
    ({"api-key": SEARCH}, 200, None),  # Azure-style clients
])
async def test_every_request_needs_a_known_key(gateway: GatewayFactory, keys_file: Path,
                                               upstream: Upstream, headers: dict[str, str],
                                               status: int, code: str | None) -> None:
    fake, _ = upstream
    client, gw = await keyed(gateway, keys_file)
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert resp.status == status
    if code is None:
        assert fake.requests[0]["headers"]["Authorization"] == "Bearer sk-first-key"
        assert "x-api-key" not in fake.requests[0]["headers"]  # the client's key stays here
        return
    body = await resp.json()
    assert body["error"]["code"] == code
    assert ("Authorization: Bearer" in body["error"]["message"]) == (code == "missing_api_key")
    assert resp.headers["WWW-Authenticate"] == "Bearer"
    assert not fake.requests
    reason = "missing" if code == "missing_api_key" else "invalid"
    assert metric(gw, "llmop_gateway_auth_failures_total", reason=reason) == 1


async def test_a_key_sees_and_uses_only_its_models(gateway: GatewayFactory, keys_file: Path,
                                                   upstream: Upstream) -> None:
    fake, _ = upstream
    client, gw = await keyed(gateway, keys_file)
    listed = await (await client.get("/v1/models", headers=bearer(BATCH))).json()
    assert [m["id"] for m in listed["data"]] == ["frontier"]
    everything = await (await client.get("/v1/models", headers=bearer(SEARCH))).json()
    assert [m["id"] for m in everything["data"]] == ["gpt-5.5", "frontier"]
    assert (await client.get("/v1/models")).status == 401

    resp = await client.post("/v1/chat/completions", json=CHAT, headers=bearer(BATCH))
    assert resp.status == 403
    error = (await resp.json())["error"]
    assert error == {"message": "key 'batch' may not use model 'gpt-5.5'; ask the gateway's "
                     "operator to allow it", "type": "permission_error", "param": "model",
                     "code": "model_not_allowed"}
    resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"},
                             headers=bearer(BATCH))
    assert resp.status == 404
    assert (await resp.json())["error"]["message"].endswith("available models: frontier")
    assert not fake.requests
    assert metric(gw, "llmop_gateway_key_refused_total", key="batch", reason="model") == 1


async def test_aliases_answer_but_are_listed_only_for_a_key_that_needs_one(
        gateway: GatewayFactory, tmp_path: Path, upstream: Upstream) -> None:
    """The router's metadata.name and namespace/name: names of the same model, not more models."""
    fake, base_url = upstream
    team = "sk-llmop-team-key"
    keys = tmp_path / "keys.yaml"
    write_keys(keys, [{"id": "search", "sha256": digest(SEARCH)},
                      {"id": "team", "sha256": digest(team), "models": ["team/*"]}])
    client, _ = await keyed(gateway, keys, routes=[{
        "models": ["gpt-5.5"], "aliases": ["team/gpt", "gpt"],
        "upstream": {"baseUrl": base_url, "auth": "none"}}])
    ids = {key: [m["id"] for m in (await (await client.get(
        "/v1/models", headers=bearer(key))).json())["data"]] for key in (SEARCH, team)}
    assert ids == {SEARCH: ["gpt-5.5"], team: ["team/gpt"]}
    for key, name, status in [(SEARCH, "gpt", 200), (team, "team/gpt", 200),
                              (team, "gpt", 403), (team, "gpt-5.5", 403)]:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "model": name},
                                 headers=bearer(key))
        assert resp.status == status, name
    assert [r["body"]["model"] for r in fake.requests] == ["gpt-5.5", "gpt-5.5"]
    resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "nope"},
                             headers=bearer(team))
    assert (await resp.json())["error"]["message"].endswith("available models: team/gpt")


async def test_a_keys_rate_limit_is_its_own(gateway: GatewayFactory, keys_file: Path) -> None:
    client, gw = await keyed(gateway, keys_file)
    body = {**CHAT, "model": "frontier"}
    for _ in range(2):
        assert (await client.post("/v1/chat/completions", json=body,
                                  headers=bearer(BATCH))).status == 200
    resp = await client.post("/v1/chat/completions", json=body, headers=bearer(BATCH))
    assert resp.status == 429 and int(resp.headers["Retry-After"]) >= 1
    assert "rate limit of key 'batch' reached" in (await resp.json())["error"]["message"]
    # Another key is not held back by it.
    assert (await client.post("/v1/chat/completions", json=body,
                              headers=bearer(SEARCH))).status == 200
    assert metric(gw, "llmop_gateway_key_refused_total", key="batch",
                  reason="rate_limit") == 1
    assert metric(gw, "llmop_gateway_key_requests_total", key="batch", status="200") == 2
    assert metric(gw, "llmop_gateway_key_requests_total", key="batch", status="429") == 1


async def test_a_spent_budget_refuses_until_the_period_renews(
        gateway: GatewayFactory, keys_file: Path, upstream: Upstream) -> None:
    fake, _ = upstream
    # $5 / $30 per million: 1000 prompt + 1000 completion tokens cost $0.035.
    write_keys(keys_file, [{"id": "search", "sha256": digest(SEARCH),
                            "budget": {"usd": 0.05, "period": "day"}}])
    client, gw = await keyed(gateway, keys_file)
    assert gw.gate is not None
    gw.gate.now = lambda: dt.datetime(2026, 11, 23, 18, 0, tzinfo=dt.UTC)
    for _ in range(2):  # the first leaves $0.015; the second is let through and overspends
        fake.then(Reply(body=completion("gpt-5.5", prompt=1000, completion_tokens=1000)))
        assert (await client.post("/v1/chat/completions", json=CHAT,
                                  headers=bearer(SEARCH))).status == 200
    assert metric(gw, "llmop_gateway_key_spend_usd", key="search") == pytest.approx(0.07)
    resp = await client.post("/v1/chat/completions", json=CHAT, headers=bearer(SEARCH))
    assert resp.status == 429
    error = (await resp.json())["error"]
    assert error["type"] == "insufficient_quota" and error["code"] == "budget_exceeded"
    assert error["message"] == ("key 'search' has spent $0.0700 of its $0.05 budget for "
                                "2026-11-23; it renews at 2026-11-24 00:00 UTC")
    assert resp.headers["Retry-After"] == str(6 * 3600)
    assert len(fake.requests) == 2
    gw.gate.now = lambda: dt.datetime(2026, 11, 24, 0, 1, tzinfo=dt.UTC)
    assert (await client.post("/v1/chat/completions", json=CHAT,
                              headers=bearer(SEARCH))).status == 200


async def test_streams_count_against_the_key(gateway: GatewayFactory, keys_file: Path,
                                             upstream: Upstream) -> None:
    fake, _ = upstream
    fake.then(Reply(chunks=sse_chunks("gpt-5.5", ["Hi"], usage=(7, 4))))
    client, gw = await keyed(gateway, keys_file)
    resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True},
                             headers=bearer(SEARCH))
    assert resp.status == 200
    await resp.read()
    assert metric(gw, "llmop_gateway_key_tokens_total", key="search", kind="prompt") == 7
    assert metric(gw, "llmop_gateway_key_tokens_total", key="search", kind="completion") == 4
    assert metric(gw, "llmop_gateway_key_requests_total", key="search", status="200") == 1
    expected = (7 * 5 + 4 * 30) / 1e6
    assert metric(gw, "llmop_gateway_key_cost_usd_total", key="search") == \
        pytest.approx(expected)


async def test_keys_rotate_without_a_restart(gateway: GatewayFactory, keys_file: Path,
                                             caplog: pytest.LogCaptureFixture) -> None:
    client, _ = await keyed(gateway, keys_file)
    assert (await client.post("/v1/chat/completions", json=CHAT,
                              headers=bearer(SEARCH))).status == 200
    rotated = "sk-llmop-search-team-key-2"
    write_keys(keys_file, [{"id": "search", "sha256": digest(rotated)}])
    assert (await client.post("/v1/chat/completions", json=CHAT,
                              headers=bearer(SEARCH))).status == 401
    assert (await client.post("/v1/chat/completions", json=CHAT,
                              headers=bearer(rotated))).status == 200

    caplog.set_level(logging.INFO)
    keys_file.write_text("keys: [{id: search, sha256: ")  # a torn write
    assert (await client.post("/v1/chat/completions", json=CHAT,
                              headers=bearer(rotated))).status == 200  # last good keys
    ready = await (await client.get("/ready")).json()
    assert ready["status"] == "ready" and ready["clientKeys"] == 1
    assert "not valid YAML; the previous keys stay in force" in ready["warnings"][0]
    logged = caplog.text + (await (await client.get("/metrics")).text())
    assert rotated not in logged and SEARCH not in logged and digest(rotated) not in logged


async def test_the_openai_sdk_raises_its_own_errors(gateway: GatewayFactory,
                                                    keys_file: Path) -> None:
    client, _ = await keyed(gateway, keys_file)
    base = str(client.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="sk-llmop-wrong",
                                  max_retries=0) as sdk:
        with pytest.raises(openai.AuthenticationError, match="not valid"):
            await sdk.chat.completions.create(model="gpt-5.5", messages=[])
    async with openai.AsyncOpenAI(base_url=base, api_key=BATCH, max_retries=0) as sdk:
        with pytest.raises(openai.PermissionDeniedError, match="may not use model"):
            await sdk.chat.completions.create(model="gpt-5.5", messages=[])
        assert [m.id async for m in sdk.models.list()] == ["frontier"]
        answer = await sdk.chat.completions.create(model="frontier", messages=[
            {"role": "user", "content": "hi"}])
        assert answer.choices[0].message.content == "Hello!"


async def test_a_gateway_without_client_keys_stays_open(gateway: GatewayFactory) -> None:
    client, gw = await gateway()
    assert gw.gate is None
    assert (await client.post("/v1/chat/completions", json=CHAT)).status == 200


async def test_a_broken_keys_file_stops_the_gateway_at_start(gateway: GatewayFactory,
                                                            tmp_path: Path) -> None:
    from llm_operator.access.keyring import KeyringError  # noqa: PLC0415

    bad = tmp_path / "keys.yaml"
    bad.write_text("keys:\n  - id: a\n    sha256: short\n")
    with pytest.raises(KeyringError, match=r"keys.yaml: keys.0.sha256"):
        await keyed(gateway, bad)


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/chat/completions"), ("POST", "/v1/completions"), ("POST", "/v1/embeddings"),
    ("POST", "/v1/responses"), ("POST", "/v1/messages"), ("POST", "/v1/moderations"),
    ("GET", "/v1/models"),
])
async def test_a_request_without_a_key_gets_401_on_every_endpoint(
        gateway: GatewayFactory, keys_file: Path, upstream: Upstream, method: str, path: str
        ) -> None:
    """One way to stop a request: /v1/moderations answered 500 where chat answered 401."""
    fake, _ = upstream
    client, _ = await keyed(gateway, keys_file)
    resp = await client.request(method, path, json={**CHAT, "input": "hi"})
    body = await resp.json()
    assert resp.status == 401, body
    assert "missing_api_key" in str(body) or "API key" in str(body)
    assert not fake.requests


async def test_a_moderation_check_counts_against_the_keys_rate_limit(
        gateway: GatewayFactory, keys_file: Path, upstream: Upstream) -> None:
    """Checked here by the model's own guards: once each, as a request would be."""
    client, _ = await gateway({"guardrails": {"input": [
        {"name": "no-pii", "action": "mask", "pii": {}}]}},
        config={"clientKeys": {"file": str(keys_file)}})
    statuses = []
    for _ in range(3):  # the batch key may send 2 requests a minute
        resp = await client.post("/v1/moderations", headers=bearer(BATCH),
                                 json={"model": "frontier", "input": "hi"})
        statuses.append(resp.status)
    assert statuses[-1] == 429 and statuses.count(429) == 1, statuses


async def test_guards_run_after_the_keys_limits_so_a_refused_client_costs_no_check(
        gateway: GatewayFactory, keys_file: Path, upstream: Upstream) -> None:
    client, gw = await gateway({"guardrails": {"input": [
        {"name": "no-cards", "action": "block", "pii": {"entities": ["CREDIT_CARD"]}}]}},
        config={"clientKeys": {"file": str(keys_file)}})
    codes = []
    for _ in range(3):  # the batch key may send 2 requests a minute
        resp = await client.post("/v1/chat/completions", headers=bearer(BATCH), json={
            **CHAT, "model": "frontier",
            "messages": [{"role": "user", "content": "card 4111 1111 1111 1111"}]})
        codes.append((resp.status, (await resp.json())["error"]["code"]))
    assert codes == [(400, "guardrail_blocked")] * 2 + [(429, "rate_limit_exceeded")]
    assert metric(gw, "llmop_gateway_guardrail_activations_total", route="gpt-5.5",
                  guard="no-cards", direction="input", action="block",
                  entity="CREDIT_CARD") == 2
