"""The llama.cpp engine `llmop up` runs per model: OpenAI requests in, clear errors out."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llm_operator.local.engine import BadRequest, request_kwargs

from localstack import example_dir, options, row, running

MESSAGES = [{"role": "user", "content": "Count from one to five."}]


@pytest.mark.parametrize(("body", "chat", "kwargs"), [
    ({"model": "m", "messages": MESSAGES, "max_tokens": 8, "temperature": 0, "user": "u"},
     True, {"messages": MESSAGES, "max_tokens": 8, "temperature": 0}),
    ({"messages": MESSAGES, "max_completion_tokens": 4, "stop": ["\n"], "seed": 1}, True,
     {"messages": MESSAGES, "max_tokens": 4, "stop": ["\n"], "seed": 1}),
    ({"prompt": "Once", "max_tokens": 3, "echo": True}, False,
     {"prompt": "Once", "max_tokens": 3, "echo": True}),
])
def test_openai_bodies_become_model_calls(body: dict[str, Any], chat: bool,
                                          kwargs: dict[str, Any]) -> None:
    assert request_kwargs(body, chat) == kwargs


@pytest.mark.parametrize(("body", "chat", "message"), [
    ([], True, "the body must be a JSON object"),
    ({"messages": []}, True, "messages must be a non-empty list of {role, content}"),
    ({"messages": MESSAGES, "max_tokens": 0}, True, "max_tokens must be a positive integer"),
    ({"messages": MESSAGES, "temperature": "hot"}, True, "temperature must be a number"),
    ({"prompt": 3}, False, "prompt must be a string"),
])
def test_bad_requests_name_the_field(body: Any, chat: bool, message: str) -> None:
    with pytest.raises(BadRequest, match=message.replace("{", r"\{").replace("}", r"\}")):
        request_kwargs(body, chat)


async def test_the_engine_streams_with_usage_completes_and_refuses_bad_bodies(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
        base = f"http://127.0.0.1:{port}/v1"
        async with aiohttp.ClientSession() as http:
            events = []
            async with http.post(f"{base}/chat/completions", json={
                    "messages": MESSAGES, "max_tokens": 12, "temperature": 0, "stream": True,
                    "stream_options": {"include_usage": True}}) as resp:
                assert resp.status == 200
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        events.append(line[6:].strip())
            assert events[-1] == b"[DONE]"
            chunks = [json.loads(e) for e in events[:-1]]
            texts = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get(
                "content")]
            usage = chunks[-1]["usage"]
            assert chunks[-1]["choices"] == []
            assert usage["completion_tokens"] == len(texts) > 0
            for ending, limits in (("length", {"max_tokens": 12}),
                                   ("stop", {"max_tokens": 200, "stop": [" "]})):
                body = {"messages": MESSAGES, "temperature": 0, **limits}
                async with http.post(f"{base}/chat/completions", json=body) as resp:
                    plain = await resp.json()
                assert plain["choices"][0]["finish_reason"] == ending
                streamed = await _streamed_usage(http, base, body)
                assert streamed["prompt_tokens"] == plain["usage"]["prompt_tokens"], ending
                if ending == "length":  # a stop string's own token is counted, never sent
                    assert streamed == plain["usage"]
            assert {c["model"] for c in chunks} == {"gemma-3-270m-it"}
            async with http.post(f"{base}/completions", json={
                    "prompt": "The capital of France is", "max_tokens": 4}) as resp:
                body = await resp.json()
                assert resp.status == 200 and body["choices"][0]["text"]
            async with http.post(f"{base}/chat/completions", json={"messages": []}) as resp:
                assert resp.status == 400
                assert (await resp.json())["error"]["message"] == \
                    "messages must be a non-empty list of {role, content}"


async def _streamed_usage(http: aiohttp.ClientSession, base: str, body: dict[str, Any]
                          ) -> dict[str, int]:
    usage: dict[str, int] = {}
    async with http.post(f"{base}/chat/completions", json={
            **body, "stream": True, "stream_options": {"include_usage": True}}) as resp:
        async for line in resp.content:
            if line.startswith(b"data: {"):
                usage = json.loads(line[6:]).get("usage") or usage
    return usage


async def test_a_client_that_leaves_mid_stream_stops_the_generation(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    endless = {"prompt": "1, 2, 3,", "max_tokens": 3000, "stream": True,
               "logit_bias": {"1": -100, "106": -100}}  # Gemma's end tokens: never stop
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
        base = f"http://127.0.0.1:{port}/v1"
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{base}/completions", json=endless) as resp:
                assert resp.status == 200
                await resp.content.readline()  # the first token, then hang up
            # 3,000 tokens take ~100 s here; the next request runs as soon as it stopped.
            async with asyncio.timeout(30), http.post(f"{base}/completions", json={
                    "prompt": "Hello", "max_tokens": 2}) as resp:
                assert resp.status == 200
