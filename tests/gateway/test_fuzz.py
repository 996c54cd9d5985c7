"""Hostile traffic from the gateway's own OpenAPI description: no 5xx, no hang, no leak.

The gateway describes itself (``GET /openapi.json``); hypothesis draws request bodies from
each endpoint's schema (valid ones, ones with a field missing or of the wrong type, and
arbitrary JSON), sent with no key, a wrong key or the right one, to a gateway with client
keys and a masking PII guard on the way in and out. Every answer comes within its time, is
not a server error, carries no traceback, and nothing the gateway logs holds a key or a
card number. Drawn with a fixed seed (``derandomize``): the same cases every run.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_operator.access.keyring import digest

from fake_upstream import FakeUpstream
from gwtools import GatewayFactory

Upstream = tuple[FakeUpstream, str]
KEY = "sk-llmop-fuzz-key-0123456789"
CARD = "4111 1111 1111 1111"
CASES_PER_ENDPOINT = 60
ANSWER_SECONDS = 10.0
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
TEXT = st.text(max_size=40) | st.sampled_from([f"card {CARD}", "mail jane@example.com", ""])


def from_schema(schema: dict[str, Any], models: list[str], depth: int = 0
                ) -> st.SearchStrategy[Any]:
    """Values an OpenAPI (JSON Schema) fragment describes; the model ids are the known ones
    and others."""
    if "oneOf" in schema:
        return st.one_of([from_schema(s, models, depth + 1) for s in schema["oneOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        fields = {k: from_schema(v, models, depth + 1) for k, v in props.items()
                  if k == "model" or depth < 4}
        if "model" in fields:
            fields["model"] = st.sampled_from(models) | st.text(max_size=12)
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required})
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), models, depth + 1),
                        min_size=schema.get("minItems", 0), max_size=3)
    if kind == "string":
        return TEXT
    if kind == "integer":
        return st.integers(min_value=-2, max_value=2**40)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=5)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return JSON


def mutated(valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """A valid body with one field dropped or replaced by any JSON value."""
    def mutate(body: dict[str, Any], data: st.DataObject) -> Any:
        if not body:
            return body
        key = data.draw(st.sampled_from(sorted(body)))
        if data.draw(st.booleans()):
            return {k: v for k, v in body.items() if k != key}
        return {**body, key: data.draw(JSON)}
    return st.builds(mutate, valid, st.data())


def drawn(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` values of ``strategy``, the same each run."""
    out: list[Any] = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return out


HEADERS = st.sampled_from([{}, {"Authorization": f"Bearer {KEY}"},
                           {"Authorization": "Bearer sk-wrong"}, {"x-api-key": KEY}])


@pytest.fixture
async def fuzzed(gateway: GatewayFactory, tmp_path: Path) -> Any:
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [{"id": "fuzz", "sha256": digest(KEY)}]}))
    guard = {"name": "no-pii", "action": "mask", "pii": {}}
    client, _ = await gateway({"guardrails": {"input": [guard], "output": [guard]}},
                              config={"clientKeys": {"file": str(keys)}})
    return client


async def test_every_endpoint_answers_hostile_bodies_without_a_server_error(
        fuzzed: Any, upstream: Upstream, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # the guard's detector built first (its thread imports what hypothesis looks at)
    ready = await fuzzed.post("/v1/moderations", json={"model": "gpt-5.5", "input": CARD},
                              headers={"Authorization": f"Bearer {KEY}"})
    assert ready.status == 200, await ready.text()
    described = await (await fuzzed.get("/openapi.json")).json()
    posts = {path: op["post"] for path, op in described["paths"].items() if "post" in op}
    assert set(posts) >= {"/v1/chat/completions", "/v1/completions", "/v1/embeddings",
                          "/v1/responses", "/v1/messages", "/v1/moderations"}
    models = ["gpt-5.5", "frontier"]
    sent: dict[str, int] = {}
    statuses: dict[int, int] = {}
    for path, op in posts.items():
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        valid = from_schema(schema, models)
        bodies = st.tuples(valid | mutated(valid) | JSON, HEADERS)
        for body, headers in drawn(bodies, CASES_PER_ENDPOINT):
            async with asyncio.timeout(ANSWER_SECONDS):
                resp = await fuzzed.post(path, data=json.dumps(body), headers={
                    "Content-Type": "application/json", **headers})
                text = await resp.text()
            assert resp.status < 500, (path, body, headers, resp.status, text)
            assert "Traceback" not in text and KEY not in text, (path, body, text)
            sent[path] = sent.get(path, 0) + 1
            statuses[resp.status] = statuses.get(resp.status, 0) + 1
    logged = caplog.text
    assert KEY not in logged and "sk-first-key" not in logged and CARD not in logged
    assert sum(sent.values()) == CASES_PER_ENDPOINT * len(posts)
    assert {200, 400, 401} <= set(statuses), statuses  # it reached the model and refused


@pytest.mark.parametrize("raw", [
    b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"model": "gpt-5.5", "messages": ' + b"[" * 5000
    + b"]" * 5000 + b"}", b'{"model": ' + b'"x' * 10 + b"}",
], ids=["empty", "cut", "a list", "null", "not UTF-8", "nested 5000 deep", "bad string"])
async def test_bodies_that_are_not_a_json_object_are_a_400_that_says_so(
        fuzzed: Any, raw: bytes) -> None:
    for path in ("/v1/chat/completions", "/v1/moderations", "/v1/messages"):
        resp = await fuzzed.post(path, data=raw, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {KEY}"})
        body = await resp.json()
        assert resp.status == 400, (path, raw[:40], body)
        assert "message" in body.get("error", {}), body
