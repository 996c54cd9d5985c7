"""`llmop up` serves LoRA adapters on the real Gemma 3 270M: each a model name of its own."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from mcp.client import Client

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.weights import locate

from ggufs import write_lora
from localstack import gemma, options, row, running, write_model

QUESTION = "Q: What is the capital of France?\nA:"


async def _with_adapter(tmp_path: Path, model_cache: Path) -> Path:
    models = tmp_path / "models"
    base = await locate(parse_llmmodel(gemma()), models, model_cache)
    write_lora(models / "adapters" / "wild.gguf", base)
    write_model(models, gemma(loraAdapters=[
        {"name": "gemma-wild", "rank": 4, "toolName": "gemma_wild",
         "source": {"type": "file", "path": "adapters/wild.gguf"}}]))
    return models


async def test_an_adapter_answers_under_its_own_name_and_the_base_model_stays_itself(
        tmp_path: Path, model_cache: Path) -> None:
    models = await _with_adapter(tmp_path, model_cache)
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        assert row(up.snapshot(), "gemma3-270m")["phase"] == "Ready"
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            listed = [m.id async for m in client.models.list()]

            async def ask(model: str, **extra: object) -> openai.types.Completion:
                return await client.completions.create(
                    model=model, prompt=QUESTION, max_tokens=8, temperature=0,
                    extra_body=extra or None)

            base = await ask("gemma-3-270m")
            adapted = await ask("gemma-wild")
            base_again = await ask("gemma-3-270m")
            by_id = await ask("gemma-3-270m", lora=[{"id": 0, "scale": 1.0}])
            unknown = await ask("gemma-3-270m", lora=[{"id": 3, "scale": 1.0}])
            streamed = await client.completions.create(
                model="gemma-wild", prompt=QUESTION, max_tokens=8, temperature=0, stream=True)
            chunks = [c async for c in streamed]
        async with Client(up.mcp_url, mode="legacy") as mcp:
            tools = [t.name for t in (await mcp.list_tools()).tools]
            tool_answer = await mcp.call_tool("gemma_wild", {
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
                "max_tokens": 8, "temperature": 0})
    assert listed == ["gemma-3-270m", "gemma-wild"]
    assert "Paris" in base.choices[0].text
    assert adapted.model == "gemma-3-270m"  # llama-server names its model, as in a cluster
    assert adapted.choices[0].text != base.choices[0].text  # the adapter's weights answered
    assert base_again.choices[0].text == base.choices[0].text  # and were taken off again
    assert by_id.choices[0].text == adapted.choices[0].text  # llama-server's per-request lora
    assert unknown.choices[0].text == base.choices[0].text  # llama-server ignores the id
    assert {c.model for c in chunks} == {"gemma-3-270m"}
    assert "".join(c.choices[0].text for c in chunks if c.choices) == adapted.choices[0].text
    assert tools == ["list_available_models", "gemma3_270m_local", "gemma_wild"]
    assert not tool_answer.is_error


@pytest.mark.parametrize(("source", "phase", "detail"), [
    ({"type": "file", "path": "adapters/gone.gguf"}, "Failed",
     "loraAdapters a: source.path {models}/adapters/gone.gguf does not exist or is not a file"),
    ({"type": "huggingface", "repo": "acme/sql"}, "Unplaceable",
     "LoRA adapter a: source type huggingface is fetched inside a cluster; on one machine "
     "use type file with a path to its GGUF file"),
], ids=["missing file", "cluster source"])
async def test_an_adapter_that_cannot_be_served_here_says_what_to_fix(
        tmp_path: Path, model_cache: Path, source: dict[str, str], phase: str,
        detail: str) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(loraAdapters=[{"name": "a", "source": source}]))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        found = row(up.snapshot(), "gemma3-270m")
    assert (found["phase"], found["detail"]) == (phase, detail.format(models=models))
