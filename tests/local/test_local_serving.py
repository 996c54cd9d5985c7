"""How `llmop up` serves a llama.cpp model through the gateway: slots, queue, cancel, limits."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import openai

from localstack import example_dir, gemma, options, row, running, write_model

LONG = {"model": "gemma-3-270m", "prompt": "Once upon a time", "max_tokens": 2000,
        "temperature": 1.0, "ignore_eos": True}  # runs for half a minute unless stopped


async def _slots(up: Any, name: str = "gemma3-270m") -> list[dict[str, Any]]:
    """llama-server's own /slots of a served model."""
    port = row(up.snapshot(), name)["where"].rsplit(":", 1)[1]
    async with aiohttp.ClientSession() as http, \
            http.get(f"http://127.0.0.1:{port}/slots") as resp:
        slots: list[dict[str, Any]] = await resp.json()
        return slots


async def _until_idle(up: Any, timeout: float) -> None:
    async with asyncio.timeout(timeout):
        while any(s["is_processing"] for s in await _slots(up)):
            await asyncio.sleep(0.05)


async def _stream_until_first_token(http: aiohttp.ClientSession, url: str,
                                    body: dict[str, Any]) -> aiohttp.ClientResponse:
    resp = await http.post(f"{url}/completions", json={**body, "stream": True})
    assert resp.status == 200, await resp.text()
    async for line in resp.content:
        if line.startswith(b"data: {"):
            return resp
    raise AssertionError("the stream ended before its first token")


async def test_concurrent_requests_share_the_slots_and_status_shows_them(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")  # 8 slots
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            asks = [asyncio.create_task(client.completions.create(
                model="gemma-3-270m", prompt=f"Story {i}: once upon a time", max_tokens=160,
                temperature=1.0, extra_body={"ignore_eos": True})) for i in range(4)]
            busy = await up.until(lambda s: (row(s, "gemma3-270m")["load"] or {}).get(
                "busy", 0) >= 3, 60)
            answers = await asyncio.gather(*asks)
        load = row(busy, "gemma3-270m")["load"]
    assert load["slots"] == 8 and load["busy"] >= 3
    assert [a.usage.completion_tokens for a in answers if a.usage] == [160] * 4


async def test_a_client_that_leaves_frees_its_slot_plain_or_streamed(tmp_path: Path,
                                                             model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        async with aiohttp.ClientSession() as http:
            resp = await _stream_until_first_token(http, up.gateway_url, LONG)
            assert any(s["is_processing"] for s in await _slots(up))
            resp.close()  # the client goes away mid-answer
        await _until_idle(up, 5)
        # a plain request too: the gateway streams it from llama-server (streamUpstream)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.5)) as http:
            with contextlib.suppress(TimeoutError):
                await http.post(f"{up.gateway_url}/completions", json=LONG)
                raise AssertionError("a 2000-token answer came back within 1.5 s")
        await _until_idle(up, 5)


async def test_a_full_queue_is_refused_with_429_and_retry_after(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(llamaCpp={"parallelSlots": 1}))
    opts = replace(options(models, tmp_path / "state", model_cache), max_queue=1)
    async with running(opts) as up, aiohttp.ClientSession() as http:
        generating = await _stream_until_first_token(http, up.gateway_url, LONG)
        waiting = asyncio.create_task(http.post(f"{up.gateway_url}/completions", json=LONG))
        await up.until(lambda s: (row(s, "gemma3-270m")["load"] or {}).get("waiting") == 1,
                       30)
        async with http.post(f"{up.gateway_url}/completions", json=LONG) as refused:
            body = await refused.json()
            retry_after = refused.headers.get("Retry-After")
        generating.close()
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert refused.status == 429  # the ID holding the most is refused (here the only one)
    assert body["error"]["code"] == "model_overloaded"
    assert body["error"]["message"].startswith("'ai-models/gemma3-270m' is at capacity")
    assert retry_after is not None and int(retry_after) >= 1


async def test_n_predict_is_the_answer_length_when_a_request_names_none(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(engineArgs={"ctx-size": "4096", "chat-template": "gemma",
                                          "n-predict": "7"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            capped = await client.completions.create(
                model="gemma-3-270m", prompt="Once upon a time",
                extra_body={"ignore_eos": True})
            asked = await client.completions.create(
                model="gemma-3-270m", prompt="Once upon a time", max_tokens=9,
                extra_body={"ignore_eos": True})
    assert capped.usage is not None and capped.usage.completion_tokens == 7
    assert capped.choices[0].finish_reason == "length"
    assert asked.usage is not None and asked.usage.completion_tokens == 9


async def test_a_model_declared_for_embeddings_answers_embeddings(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(domains=["embedding"], llamaCpp=None,
                              engineArgs={"ctx-size": "2048", "pooling": "mean"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            answer = await client.embeddings.create(
                model="gemma-3-270m", input=["Paris is in France", "Kubernetes schedules pods"])
    vectors = [d.embedding for d in answer.data]
    assert [len(v) for v in vectors] == [640, 640]  # Gemma 3 270M's hidden size
    assert vectors[0] != vectors[1]
    assert json.dumps(vectors[0])  # plain floats
