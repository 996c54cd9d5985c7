"""Gateway building blocks in isolation: config errors, token bucket, breaker, usage parsing."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_operator.access.limits import TokenBucket, retry_after_header
from llm_operator.api.validation import parse_llmmodel
from llm_operator.gateway.providers.sse import usage_from_body, usage_from_sse
from llm_operator.gateway.routing.breaker import Breaker, State
from llm_operator.gateway.settings.config import (
    ApiKeySource,
    ConfigError,
    load_config,
    parse_config,
)
from llm_operator.gateway.upstream.credentials import KeySource, KeyUnavailable
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from gwtools import FakeTime

REPO = Path(__file__).resolve().parents[2]
ROUTE = {"models": ["m"], "upstream": {"baseUrl": "https://api.example.com/v1"}}


@pytest.mark.parametrize(("doc", "words"), [
    ({}, "routes: add at least one route"),
    ({"routes": []}, "routes: add at least one route"),
    ({"routes": [{**ROUTE, "upstream": {"baseUrl": "ftp://x"}}]},
     "routes.0.upstream.baseUrl: String should match pattern"),
    ({"routes": [{**ROUTE, "rateLimit": {"requestsPerMinute": 0}}]},
     "routes.0.rateLimit.requestsPerMinute: Input should be greater than or equal to 1"),
    ({"routes": [{**ROUTE, "upstream": {"baseUrl": "https://a/v1", "apiKey": {}}}]},
     "routes.0.upstream.apiKey: set exactly one of file or env"),
    ({"routes": [ROUTE, ROUTE]}, "model 'm' is already routed"),
    ({"routes": [{**ROUTE, "retries": 3}]}, "routes.0.retries: unknown field"),
    ({"routes": [{**ROUTE, "upstream": {"baseUrl": "https://a/v1",
                                        "headers": {"X-A": "1\r\nHost: evil"}}}]},
     "routes.0.upstream: headers: 'X-A' is not a valid header"),
    ({"routes": [{**ROUTE, "upstream": {"baseUrl": "https://a/v1",
                                        "headers": {"X A": "1"}}}]},
     "routes.0.upstream: headers: 'X A' is not a valid header"),
    ({"routes": [{**ROUTE, "upstream": {
        "baseUrl": "https://generativelanguage.googleapis.com/v1beta"}}]},
     "routes.0.upstream: baseUrl: Gemini's OpenAI-compatible API is "
     "https://generativelanguage.googleapis.com/v1beta/openai; for Google's native API "
     "(.../v1beta) set api to gemini"),
    ({"routes": [{**ROUTE, "upstream": {
        "api": "gemini", "baseUrl": "https://generativelanguage.googleapis.com/v1beta/openai"}}]},
     "routes.0.upstream: baseUrl: with api gemini, use Google's native API"),
    ({"routes": [{**ROUTE, "upstream": {"api": "bedrock", "baseUrl": "https://a/v1"}}]},
     "routes.0.upstream.api: Input should be 'openai', 'anthropic' or 'gemini'"),
])
def test_invalid_config_names_the_field(doc: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        parse_config(doc)


def test_unreadable_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("routes: [\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(bad)


@pytest.mark.parametrize(("gateway", "rpm", "redis"), [
    ({}, 5000, None),  # 10,000 / 2 replicas, each on its own
    ({"replicas": 4}, 2500, None),
    ({"redisUrl": "redis://redis.llm-operator-system.svc:6379/0"}, 10000,
     {"url": "redis://redis.llm-operator-system.svc:6379/0", "localShare": 0.5}),
    ({"redisUrl": "redis://r:6379/0", "redisPasswordSecret": "redis-auth", "replicas": 3},
     10000, {"url": "redis://r:6379/0", "localShare": 0.333333,
             "passwordFile": "/var/run/secrets/llmop/redis/password"}),
])
def test_rendered_gateway_config_is_valid(gateway: dict[str, Any], rpm: int,
                                          redis: dict[str, Any] | None) -> None:
    """What the renderer puts in the ConfigMap is what the gateway accepts."""
    doc = yaml.safe_load((REPO / "config/samples/gpt55-remote.yaml").read_text())
    doc["spec"]["remoteApi"]["rateLimitRpm"] = 10000
    settings = Settings.model_validate({"gateway": gateway})
    objects = render(parse_llmmodel(doc), settings)
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    raw = yaml.safe_load(config_map["data"]["gateway.yaml"])
    config = parse_config(raw)
    route = config.routes[0]
    assert route.models == ["gpt-5.5"] and route.rate_limit.requests_per_minute == rpm
    assert raw.get("redis") == redis
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    if "redisPasswordSecret" in gateway:
        assert volumes["redis"]["secret"]["secretName"] == "redis-auth"
    else:
        assert "redis" not in volumes


@pytest.mark.parametrize(("sample", "remote_api", "api", "key_style"), [
    ("gpt55-remote", {}, "openai", "bearer"),
    ("claude-opus47-remote", {"api": "anthropic", "baseUrl": "https://api.anthropic.com/v1"},
     "anthropic", "x-api-key"),
    ("gemini31-remote", {"api": "gemini",
                         "baseUrl": "https://generativelanguage.googleapis.com/v1beta"},
     "gemini", "x-goog-api-key"),
])
def test_a_native_remote_api_reaches_the_gateway_config(
        sample: str, remote_api: dict[str, str], api: str, key_style: str) -> None:
    doc = yaml.safe_load((REPO / f"config/samples/{sample}.yaml").read_text())
    doc["spec"]["remoteApi"].update(remote_api)
    objects = render(parse_llmmodel(doc), Settings())
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    upstream = parse_config(yaml.safe_load(config_map["data"]["gateway.yaml"])).routes[0] \
        .deployments[0]
    assert (upstream.api, upstream.key_style) == (api, key_style)


def test_a_redis_url_with_a_password_is_refused_in_settings() -> None:
    with pytest.raises(ValueError, match="String should match pattern"):
        Settings.model_validate({"gateway": {"redisUrl": "redis://:hunter2@r:6379/0"}})


def test_token_bucket_refills_over_time() -> None:
    time = FakeTime()
    bucket = TokenBucket(60, time.clock)  # one per second, burst 60
    assert all(bucket.take() == 0 for _ in range(60))
    assert bucket.take() == pytest.approx(1.0)
    time.now += 0.5
    assert bucket.take() == pytest.approx(0.5)
    time.now += 0.5
    assert bucket.take() == 0


def test_token_bucket_spend_can_go_negative() -> None:
    time = FakeTime()
    bucket = TokenBucket(600, time.clock)  # 10 per second
    bucket.spend(700)
    assert bucket.wait_seconds(1) == pytest.approx(10.1)


@pytest.mark.parametrize(("seconds", "header"), [(0.01, "1"), (1.0, "1"), (1.2, "2"), (30, "30")])
def test_retry_after_is_whole_seconds(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header


def test_breaker_opens_half_opens_and_closes() -> None:
    time = FakeTime()
    breaker = Breaker(threshold=3, open_seconds=10, clock=time.clock)
    for _ in range(2):
        breaker.failure()
    assert breaker.state is State.CLOSED and breaker.allow()
    breaker.failure()
    assert breaker.state is State.OPEN and not breaker.allow()
    assert breaker.retry_in() == 10
    time.now += 10
    assert breaker.state is State.HALF_OPEN
    assert breaker.allow() and not breaker.allow()  # one trial at a time
    breaker.failure()
    assert breaker.state is State.OPEN  # the trial failed: open again
    time.now += 10
    assert breaker.allow()
    breaker.success()
    assert breaker.state is State.CLOSED


def test_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    source = KeySource(ApiKeySource(env="UPSTREAM_KEY"))
    monkeypatch.setenv("UPSTREAM_KEY", "sk-env")
    assert source.get() == "sk-env"
    monkeypatch.delenv("UPSTREAM_KEY")
    with pytest.raises(KeyUnavailable, match=r"env \$UPSTREAM_KEY is not set"):
        source.get()


@pytest.mark.parametrize("where", ["env", "file"])
def test_a_key_with_a_line_break_inside_is_unavailable_and_never_shown(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str) -> None:
    """Sent as is, it would split the upstream request (header injection)."""
    key = "sk-one\nX-Injected: yes"
    (tmp_path / "key").write_text(key)
    monkeypatch.setenv("UPSTREAM_KEY", key)
    source = KeySource(ApiKeySource(**{where: "UPSTREAM_KEY" if where == "env"
                                       else str(tmp_path / "key")}))
    with pytest.raises(KeyUnavailable, match="has a line break inside it") as raised:
        source.get()
    assert "sk-one" not in str(raised.value)


@pytest.mark.parametrize(("body", "tokens"), [
    (b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2}}', (5, 2, 0)),
    (b'{"usage": {"input_tokens": 9, "output_tokens": 4}}', (9, 4, 0)),
    (b'{"usage": {"prompt_tokens": 50, "completion_tokens": 2, '
     b'"prompt_tokens_details": {"cached_tokens": 48}}}', (50, 2, 48)),
    (b'{"usage": {"input_tokens": 9, "output_tokens": 4, '
     b'"input_tokens_details": {"cached_tokens": 8}}}', (9, 4, 8)),
    (b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2, '
     b'"prompt_tokens_details": {"cached_tokens": "many"}}}', (5, 2, 0)),
    (b'{"usage": {"prompt_tokens": 5, "completion_tokens": 2, '
     b'"prompt_tokens_details": null}}', (5, 2, 0)),
    (b'{"choices": []}', (0, 0, 0)),
    (b'{"usage": null}', (0, 0, 0)),
    (b"not json but \"usage\"", (0, 0, 0)),
])
def test_usage_from_body(body: bytes, tokens: tuple[int, int, int]) -> None:
    assert usage_from_body(body) == tokens


def test_usage_from_sse_takes_the_last_usage_event() -> None:
    tail = (b'data: {"choices":[{"delta":{"content":"x"}}]}\n\n'
            b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":8}}\n\n'
            b'data: [DONE]\n\n')
    assert usage_from_sse(tail) == (3, 8, 0)
    responses = b'data: {"type":"response.completed","response":{"usage":{"input_tokens":2,' \
                b'"output_tokens":5}}}\n\n'
    assert usage_from_sse(responses) == (2, 5, 0)
