"""On the real node: a model's guardrails, added with kubectl, run in the router's image.

The Gemma example gets a masking PII guard (`kubectl patch`); the router (config/router,
the operator's image) picks it up from the LLMModel it watches: `/v1/moderations` flags a
card number, and a prompt with an e-mail address reaches llama.cpp masked (it counts the
prompt's tokens as those of the masked text). Removed again, the prompt goes as it was.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
from e2e_cluster import GEMMA_ID, GEMMA_NAME, MODELS_NS, OPERATOR_NS, NodeCluster

from prompts import GEMMA_USER_TURN, ask, engine_prompt_now

pytestmark = pytest.mark.e2e
RAILS = {"input": [{"name": "no-pii", "action": "mask", "pii": {}}]}
PROMPTS = ("Write to jane.doe@example.com today", "Write to <EMAIL_ADDRESS> today")


def guardrails(cluster: NodeCluster, rails: dict[str, Any] | None) -> None:
    cluster.kubectl("-n", MODELS_NS, "patch", "llmmodel", GEMMA_NAME, "--type=merge", "-p",
                    json.dumps({"spec": {"guardrails": rails}}))


async def flagged(client: openai.AsyncOpenAI) -> bool:
    result = await client.moderations.create(model=GEMMA_ID,
                                             input="card 4111 1111 1111 1111")
    return result.results[0].flagged


async def prompt_tokens(client: openai.AsyncOpenAI) -> list[int]:
    answers = [await client.completions.create(model=GEMMA_ID, prompt=p, max_tokens=1)
               for p in PROMPTS]
    return [a.usage.prompt_tokens for a in answers if a.usage is not None]


async def test_a_models_guardrails_mask_its_prompts_in_the_router(routed: NodeCluster) -> None:
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=120, max_retries=0)
    async with client:
        before = await prompt_tokens(client)
        assert before[0] != before[1]  # the engine counts the address apart from its mask
        guardrails(routed, RAILS)
        try:
            async with asyncio.timeout(60):  # the router reads the model from its watch
                while not await flagged(client):
                    await asyncio.sleep(0.2)  # another process: poll it
            guarded = await prompt_tokens(client)
            # a guarded chat reaches the engine as the masked conversation, in Gemma's turns
            chat = await client.chat.completions.create(
                model=GEMMA_ID, messages=ask(PROMPTS[0]), max_tokens=1)  # type: ignore[arg-type]
        finally:
            guardrails(routed, None)
        async with asyncio.timeout(60):
            while await flagged(client):
                await asyncio.sleep(0.2)
        after = await prompt_tokens(client)
    assert guarded == [before[1], before[1]]
    engine = routed.service_url(MODELS_NS, GEMMA_NAME, 8000, "")
    masked_prompt, masked_tokens = engine_prompt_now(engine, ask(PROMPTS[1]))
    assert masked_prompt.endswith(GEMMA_USER_TURN.format(text=PROMPTS[1]))
    assert chat.usage is not None and chat.usage.prompt_tokens == masked_tokens
    assert after == before
