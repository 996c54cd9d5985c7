"""Every chat request reaches the model: what llama-server was asked, on every entry path.

`llmop up` serves examples/local's Gemma. A chat request's ``prompt_tokens`` must equal the
tokens of the prompt llama-server renders from its messages (``/apply-template``): the
conversation in Gemma's turns, one prompt per question. Before the builtin template was
applied with ``--no-jinja``, every prompt was the word ``gemma`` (3 tokens).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import yaml
from mcp.client import Client

from prompts import GEMMA_USER_TURN, KNOWN_ANSWER, QUESTIONS, ask, engine_prompt

from localstack import example_dir, options, row, running

MODEL = "gemma-3-270m"


def _engine(up: Any) -> str:
    port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
    return f"http://127.0.0.1:{port}"


def _as_chat_model(models: Path) -> None:
    """The example without its base-model note: its MCP tool then asks through chat."""
    path = models / "gemma3-270m.yaml"
    doc = yaml.safe_load(path.read_text())
    del doc["metadata"]["annotations"]["ai.example.io/base-model"]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


async def _batch(sdk: openai.AsyncOpenAI, up: Any, questions: tuple[str, ...]
                 ) -> list[dict[str, Any]]:
    data = b"".join(json.dumps({
        "custom_id": str(i), "method": "POST", "url": "/v1/chat/completions",
        "body": {"model": MODEL, "max_tokens": 1, "messages": ask(q)}}).encode() + b"\n"
        for i, q in enumerate(questions))
    uploaded = await sdk.files.create(file=("in.jsonl", data), purpose="batch")
    batch = await sdk.batches.create(input_file_id=uploaded.id, completion_window="24h",
                                     endpoint="/v1/chat/completions")
    runner = up.gateway.batch_runner
    async with asyncio.timeout(60):
        while (done := await sdk.batches.retrieve(batch.id)).status != "completed":
            runner.changed.clear()
            await runner.changed.wait()
    assert done.output_file_id is not None
    output = (await sdk.files.content(done.output_file_id)).text
    return sorted((json.loads(line) for line in output.splitlines()),
                  key=lambda line: int(line["custom_id"]))


async def test_every_entry_path_asks_the_model_the_conversation(tmp_path: Path,
                                                                model_cache: Path) -> None:
    models = example_dir(tmp_path / "models")
    _as_chat_model(models)
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as http, \
            openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0) as sdk:
        engine = _engine(up)
        rendered = [await engine_prompt(http, engine, ask(q)) for q in QUESTIONS]
        seen: dict[str, list[int]] = {}
        for question in QUESTIONS:
            plain = await sdk.chat.completions.create(model=MODEL, messages=ask(question),
                                                      max_tokens=1)  # type: ignore[arg-type]
            streamed = [c async for c in await sdk.chat.completions.create(
                model=MODEL, messages=ask(question), max_tokens=1,  # type: ignore[arg-type]
                stream=True, stream_options={"include_usage": True})]
            async with http.post(f"{up.gateway_url}/messages", json={
                    "model": MODEL, "max_tokens": 1, "messages": ask(question)}) as resp:
                assert resp.status == 200, await resp.text()
                anthropic = await resp.json()
            assert plain.usage is not None and streamed[-1].usage is not None
            for path, tokens in (("chat", plain.usage.prompt_tokens),
                                 ("chat, streamed", streamed[-1].usage.prompt_tokens),
                                 ("anthropic messages", anthropic["usage"]["input_tokens"])):
                seen.setdefault(path, []).append(tokens)
        lines = await _batch(sdk, up, QUESTIONS)
        seen["batch"] = [line["response"]["body"]["usage"]["prompt_tokens"] for line in lines]
        async with Client(up.mcp_url, mode="legacy") as client:
            async with asyncio.timeout(10):
                while "gemma3_270m_local" not in {t.name for t in
                                                  (await client.list_tools()).tools}:
                    await asyncio.sleep(0.1)
            results = [await client.call_tool("gemma3_270m_local", {
                "messages": ask(q), "max_tokens": 1}) for q in QUESTIONS]
        seen["mcp tool"] = [(r.structured_content or {})["usage"]["promptTokens"]
                            for r in results]
        known = await sdk.chat.completions.create(
            model=MODEL, messages=KNOWN_ANSWER[0], max_tokens=4,  # type: ignore[arg-type]
            temperature=0)
    for (prompt, _), question in zip(rendered, QUESTIONS, strict=True):
        assert prompt.endswith(GEMMA_USER_TURN.format(text=question)), prompt
    assert rendered[0][0] != rendered[1][0]
    expected = [tokens for _, tokens in rendered]
    assert expected[0] != expected[1] and min(expected) > 10
    assert seen == dict.fromkeys(seen, expected)  # every path: the whole conversation
    assert (known.choices[0].message.content or "").startswith(KNOWN_ANSWER[1])
