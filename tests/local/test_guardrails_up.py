"""`llmop up` runs a model's guardrails in front of the real llama-server (OpenAI SDK).

examples/guardrails too, as its header says to serve it.

What llama-server was sent is read back from what it counted: the prompt with an e-mail
address costs as many tokens as the same prompt with ``<EMAIL_ADDRESS>`` written in its
place, which it would not if the address had reached the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from prompts import GEMMA_USER_TURN, ask, engine_prompt

from localstack import gemma, options, row, running, write_model
from samples import REPO

RAILS = {"input": [{"name": "no-pii", "action": "mask", "pii": {}}],
         "output": [{"name": "no-cards", "action": "block",
                     "pii": {"entities": ["CREDIT_CARD"]}}]}


async def _tokens(up: Any, text: str) -> int:
    """How many tokens llama-server itself makes of ``text`` (its /tokenize)."""
    port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
    async with aiohttp.ClientSession() as http, http.post(
            f"http://127.0.0.1:{port}/tokenize", json={"content": text}) as resp:
        return len((await resp.json())["tokens"])


async def test_a_masked_prompt_reaches_llama_server_and_moderation_flags_it(
        tmp_path: Path, model_cache: Path) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(guardrails=RAILS))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            prompts = ["Write to jane.doe@example.com today", "Write to <EMAIL_ADDRESS> today"]
            # the precondition: the engine would count the address apart from its mask
            assert await _tokens(up, prompts[0]) != await _tokens(up, prompts[1])
            counted = [(await client.completions.create(
                model="gemma-3-270m", prompt=prompt, max_tokens=1)).usage
                       for prompt in prompts]
            # a guarded chat reaches the model as the masked conversation in Gemma's turns
            chat = (await client.chat.completions.create(
                model="gemma-3-270m", messages=ask(prompts[0]),  # type: ignore[arg-type]
                max_tokens=1)).usage
            async with aiohttp.ClientSession() as http:
                port = row(up.snapshot(), "gemma3-270m")["where"].rsplit(":", 1)[1]
                masked_prompt, masked_tokens = await engine_prompt(
                    http, f"http://127.0.0.1:{port}", ask(prompts[1]))
            moderated = await client.moderations.create(
                model="gemma-3-270m", input=["card 4111 1111 1111 1111", "a fox"])
    tokens = [usage.prompt_tokens for usage in counted if usage is not None]
    assert len(tokens) == 2 and tokens[0] == tokens[1]
    assert masked_prompt.endswith(GEMMA_USER_TURN.format(text=prompts[1]))
    assert chat is not None and chat.prompt_tokens == masked_tokens
    assert [r.flagged for r in moderated.results] == [True, False]


@pytest.mark.parametrize(("on_error", "status"), [("closed", 503), ("open", 200)])
async def test_a_judge_that_answers_no_verdict_follows_on_error_and_is_never_quoted(
        tmp_path: Path, model_cache: Path, on_error: str, status: int) -> None:
    """Gemma 270M asked as a Llama Guard: it continues the prompt instead of judging it."""
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(guardrails={"input": [{"name": "safety", "onError": on_error,
                                                     "judge": {"model": "gemma-3-270m",
                                                               "family": "llama-guard-3",
                                                               # its answer, not a timeout,
                                                               # on a loaded machine
                                                               "timeoutSeconds": 60}}]}))
    secret = "my card is 4111 1111 1111 1111"
    async with running(options(models, tmp_path / "state", model_cache)) as up, \
            aiohttp.ClientSession() as http, http.post(
                f"{up.gateway_url}/chat/completions", json={
                    "model": "gemma-3-270m", "max_tokens": 4,
                    "messages": [{"role": "user", "content": secret}]}) as answer:
        said = await answer.text()
    assert answer.status == status, said
    if status == 503:
        assert "judge gemma-3-270m: expected 'safe' or 'unsafe'" in said
        assert "4111" not in said


async def test_the_guardrails_example_masks_prompts_and_runs_its_demo_judge(
        tmp_path: Path, model_cache: Path) -> None:
    """examples/guardrails: the guarded model masks; its demo judge (a second llama-server
    that cannot judge) fails open, counted, and nothing is blocked."""
    async with running(options(REPO / "examples" / "guardrails", tmp_path / "state",
                               model_cache)) as up:
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            masked, plain = [(await client.completions.create(
                model="gemma-3-270m", prompt=f"Q: Mail {who}?\nA:", max_tokens=2)).usage
                for who in ("jane.doe@example.com", "<EMAIL_ADDRESS>")]
        async with aiohttp.ClientSession() as http, \
                http.get(up.gateway_url.removesuffix("/v1") + "/metrics") as resp:
            metrics = await resp.text()
    assert masked is not None and plain is not None
    assert masked.prompt_tokens == plain.prompt_tokens
    errors = [s.value for f in text_string_to_metric_families(metrics) for s in f.samples
              if s.name == "llmop_gateway_guardrail_errors_total"
              and s.labels == {"route": "ai-models/gemma3-270m-guarded", "direction": "input"}]
    assert errors == [2.0]  # each request's judge failed open, and was counted
