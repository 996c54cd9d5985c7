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
from hypothesis import strategies as st

from llm_operator.access.keyring import digest

from fake_upstream import FakeUpstream
from fuzzing import CARD, JSON, drawn, from_schema, mutated
from gwtools import GatewayFactory

Upstream = tuple[FakeUpstream, str]
KEY = "sk-llmop-fuzz-key-0123456789"
CASES_PER_ENDPOINT = 60
ANSWER_SECONDS = 10.0
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
