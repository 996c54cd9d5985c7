"""`llmop up`'s Batch API with the OpenAI SDK: a batch on the real Gemma, and a restart.

The store is SQLite under the state dir: stopping `llmop up` in the middle of a batch and
starting it again finishes the batch, every request once in its output.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from llm_operator.batch.state import FINISHED
from llm_operator.local.runtime import Runtime

from fake_upstream import FakeUpstream, Reply, completion
from localstack import gemma, options, running, write_model
from samples import local_doc


def jsonl(model: str, *prompts: str) -> bytes:
    return b"".join(json.dumps({
        "custom_id": prompt, "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": model, "max_tokens": 8, "temperature": 0,
                 "messages": [{"role": "user", "content": prompt}]}}).encode() + b"\n"
        for prompt in prompts)


async def until_finished(up: Runtime, batch_id: str) -> Any:
    runner = up.gateway.batch_runner
    assert runner is not None
    async with asyncio.timeout(60):
        while True:
            runner.changed.clear()
            batch = runner.store.batch(batch_id, "")
            assert batch is not None
            if batch.status in FINISHED:
                return batch
            await runner.changed.wait()


async def submit(sdk: openai.AsyncOpenAI, data: bytes) -> str:
    uploaded = await sdk.files.create(file=("in.jsonl", data), purpose="batch")
    batch = await sdk.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                     endpoint="/v1/chat/completions")
    return batch.id


async def test_a_batch_on_the_local_model_completes_with_the_openai_sdk(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma())
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused") as sdk:
        batch_id = await submit(sdk, jsonl("gemma-3-270m", "Say hi.", "Count to three."))
        await until_finished(up, batch_id)
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.status == "completed" and batch.output_file_id is not None
        output = (await sdk.files.content(batch.output_file_id)).text
        band = up.gateway.flow.settings.band("batch")
    lines = [json.loads(line) for line in output.splitlines()]
    assert [line["custom_id"] for line in lines] == ["Say hi.", "Count to three."]
    # one machine's cores: batch work only once interactive requests left for a second,
    # and then every slot but the interactive band's peak of the last minute
    assert band is not None
    assert (band.max_share, band.reserve_seconds, band.idle_seconds) == (0.5, 60, 1.0)
    assert all(line["response"]["body"]["choices"][0]["message"]["content"]
               for line in lines)


async def test_a_batch_survives_a_restart_of_llmop_up(
        tmp_path: Path, model_cache: Path, upstream: tuple[FakeUpstream, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    fake, base_url = upstream
    monkeypatch.setenv("FRONTIER_API_KEY", "sk-x")
    models = tmp_path / "models"
    models.mkdir()
    doc = local_doc("gpt55-remote")
    doc["spec"]["remoteApi"] = {"baseUrl": base_url, "apiKeySecret": "frontier-api-key"}
    write_model(models, doc)
    env = {"FRONTIER_API_KEY": "sk-x"}
    fake.then(Reply(body=completion("gpt-5.5")), Reply(body=completion("gpt-5.5"), delay=60))
    state = tmp_path / "state"
    async with running(options(models, state, model_cache, env=env)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused") as sdk:
        batch_id = await submit(sdk, jsonl("gpt-5.5", "a", "b", "c"))
        runner = up.gateway.batch_runner
        assert runner is not None
        async with asyncio.timeout(20):  # "a" answered, then llmop up stops mid-batch
            while not runner.store.done_lines(batch_id):
                runner.changed.clear()
                await runner.changed.wait()
        (shown,) = up.snapshot()["batches"]["running"]  # what `llmop status` prints
        assert (shown["id"], shown["total"]) == (batch_id, 3) and shown["completed"] >= 1
    async with running(options(models, state, model_cache, env=env)) as up, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused") as sdk:
        await until_finished(up, batch_id)
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.output_file_id is not None
        output = (await sdk.files.content(batch.output_file_id)).text
    assert [json.loads(t)["custom_id"] for t in output.splitlines()] == ["a", "b", "c"]
    assert (batch.status, batch.request_counts.completed) == ("completed", 3)
