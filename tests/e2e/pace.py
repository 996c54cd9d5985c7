"""How long the Gemma example's answers last on this machine: token counts by a timed one."""

from __future__ import annotations

import time

import openai
from e2e_cluster import GEMMA_ID


async def tokens_lasting(client: openai.AsyncOpenAI, seconds: float) -> int:
    """About how many tokens the model's one slot makes in ``seconds`` here (a timed
    32-token completion; its prompt and round trip make it an underestimate), at least 1."""
    started = time.monotonic()
    await client.completions.create(model=GEMMA_ID, prompt="Once upon a time", max_tokens=32,
                                    extra_body={"ignore_eos": True})
    return max(1, int(32 / (time.monotonic() - started) * seconds))
