"""The llama.cpp engine `llmop up` runs per model: OpenAI requests in, clear errors out."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from llm_operator.local.engine import Adapters, BadRequest, chosen_adapters, request_kwargs

from localstack import example_dir, gemma, options, row, running, write_model

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


@pytest.mark.parametrize(("body", "chat", "message", "param"), [
    ([], True, "the body must be a JSON object", None),
    ({"messages": []}, True, "messages must be a non-empty list of {role, content}",
     "messages"),
    ({"messages": MESSAGES, "max_tokens": 0}, True, "max_tokens must be a positive integer",
     "max_tokens"),
    ({"messages": MESSAGES, "max_completion_tokens": -1}, True,
     "max_tokens must be a positive integer", "max_completion_tokens"),
    ({"messages": MESSAGES, "temperature": "hot"}, True, "temperature must be a number",
     "temperature"),
    ({"prompt": 3}, False, "prompt must be a string", "prompt"),
])
def test_bad_requests_name_the_field(body: Any, chat: bool, message: str,
                                     param: str | None) -> None:
    with pytest.raises(BadRequest, match=message.replace("{", r"\{").replace("}", r"\}")) \
            as caught:
        request_kwargs(body, chat)
    assert caught.value.param == param


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
            assert {c["model"] for c in chunks} == {"gemma-3-270m"}
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


ENDLESS = {"prompt": "1, 2, 3,", "max_tokens": 3000,
           "logit_bias": {"1": -100, "106": -100}}  # Gemma's end tokens: never stop


async def test_a_request_without_max_tokens_stops_at_the_models_default(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(engineArgs={"ctx-size": "2048", "chat-template": "gemma",
                                          "n-predict": "7"}))
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as http:
        for path, body in (("chat/completions", {"messages": MESSAGES}),
                           ("completions", {"prompt": ENDLESS["prompt"]})):
            async with http.post(f"{up.gateway_url}/{path}", json={
                    "model": "gemma-3-270m", "logit_bias": ENDLESS["logit_bias"],
                    **body}) as resp:
                answer = await resp.json()
            assert answer["usage"]["completion_tokens"] == 7, path
            assert answer["choices"][0]["finish_reason"] == "length", path


async def test_a_plain_request_abandoned_by_curl_stops_its_generation(
        tmp_path: Path, model_cache: Path) -> None:
    """The issue's reproduction: `curl --max-time 3`, then a 2-token request."""
    models = example_dir(tmp_path / "models")
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        body = json.dumps({"model": "gemma-3-270m", **ENDLESS})
        curl = await asyncio.create_subprocess_exec(
            "curl", "-s", "--max-time", "3", f"{up.gateway_url}/completions",
            "-H", "Content-Type: application/json", "-d", body)
        assert await curl.wait() == 28  # curl's "operation timed out"
        # 3,000 tokens take ~60 s here; the next request runs as soon as they stopped.
        async with aiohttp.ClientSession() as http, asyncio.timeout(20), http.post(
                f"{up.gateway_url}/completions",
                json={"model": "gemma-3-270m", "prompt": "Hello", "max_tokens": 2}) as resp:
            assert resp.status == 200


async def test_requests_wait_their_turn_in_a_bounded_queue_that_is_shown(
        tmp_path: Path, model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    opts = replace(options(models, tmp_path / "state", model_cache), max_queue=1)
    async with running(opts) as up, aiohttp.ClientSession() as http:
        port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
        engine = f"http://127.0.0.1:{port}"
        short = {"model": "gemma-3-270m", "prompt": "Hello", "max_tokens": 2}
        async with http.post(f"{up.gateway_url}/completions",
                             json={"model": "gemma-3-270m", "stream": True, **ENDLESS}
                             ) as generating:
            await generating.content.readline()  # it has the thread
            waiting = asyncio.create_task(http.post(f"{up.gateway_url}/completions",
                                                    json=short))
            snap = await up.until(
                lambda s: (row(s, "gemma3-270m")["load"] or {}).get("queued") == 1, 10)
            assert row(snap, "gemma3-270m")["load"] == {"queued": 1, "generating": 1}
            async with http.get(f"{engine}/metrics") as resp:
                exposition = await resp.text()
            assert 'llmop_engine_queue_depth{model="gemma-3-270m"} 1' in exposition
            async with http.post(f"{up.gateway_url}/completions", json=short) as refused:
                assert refused.status == 429
                assert int(refused.headers["Retry-After"]) >= 1
                error = (await refused.json())["error"]
            assert error["type"] == "rate_limit_exceeded"
            assert error["message"].startswith("1 requests are already waiting for this model")
        # the stream's client left: its generation stops and the waiting request runs
        async with asyncio.timeout(20), await waiting as resp:
            assert resp.status == 200
        async with http.get(f"{engine}/metrics") as resp:
            rejected = re.search(r'^llmop_engine_requests_rejected_total\{model="gemma-3-270m"\} '
                                 r"(\d+)$", await resp.text(), re.MULTILINE)
        # passed on at once: the local route does not retry a 429
        assert rejected is not None and int(rejected[1]) == 1


NAMES = ["sql", "pirate"]


@pytest.mark.parametrize(("body", "chosen"), [
    ({"model": "gemma"}, ()),
    ({"model": "pirate"}, ((1, 1.0),)),
    ({"model": "gemma", "lora": [{"id": 0, "scale": 0.5}]}, ((0, 0.5),)),
    ({"model": "gemma", "lora": [{"id": 1}, {"id": 0, "scale": 2}]}, ((1, 1.0), (0, 2.0))),
    ({"model": "pirate", "lora": []}, ()),  # llama-server: a given list is the whole say
    ({"model": "gemma", "lora": [{"id": 0, "scale": 0}]}, ()),
])
def test_a_request_picks_adapters_by_model_name_or_llama_servers_lora(
        body: dict[str, Any], chosen: tuple[tuple[int, float], ...]) -> None:
    assert chosen_adapters(body, NAMES) == chosen


@pytest.mark.parametrize(("lora", "words"), [
    ({"id": 0}, "lora must be a list"),
    ([{"id": 2}], "one of the adapters' ids (0=sql, 1=pirate)"),
    ([{"id": True}], "one of the adapters' ids"),
    ([{"id": 0, "scale": "high"}], "scale must be a number"),
])
def test_a_bad_lora_list_names_the_field(lora: Any, words: str) -> None:
    with pytest.raises(BadRequest, match=re.escape(words)) as error:
        chosen_adapters({"model": "gemma", "lora": lora}, NAMES)
    assert error.value.param == "lora"


def test_adapters_switch_only_when_a_request_wants_others() -> None:
    applied: list[tuple[tuple[int, float], ...]] = []
    adapters = Adapters(NAMES, ["/a", "/b"], applied.append)
    for chosen in [(), ((0, 1.0),), ((0, 1.0),), (), ()]:
        adapters.use(chosen)
    assert applied == [((0, 1.0),), ()]
