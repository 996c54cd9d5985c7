"""`llmop up` gives llama-server the declared host KV tier, and a conversation comes back to it.

One slot, two conversations taking turns: the first one's second turn finds its prompt
only if the engine kept it in host memory (``--cache-ram``) when the other took the slot.
"""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from localstack import gemma, options, row, running, write_model
from samples import REPO

# Two conversations, each with a beginning of its own, long enough to count.
OPENINGS = [f"Notes on the {topic}: " + " ".join([topic] * 120) + "\nQ: And then?\nA:"
            for topic in ("harbor", "orchard")]


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


@pytest.mark.parametrize(("tier", "flag", "reused"), [
    ("1Gi", "1024", True),
    (0, "0", False),
], ids=["declared tier", "tier off"])
async def test_a_conversation_finds_its_prompt_in_the_host_tier_after_another_took_the_slot(
        tmp_path: Path, model_cache: Path, tier: int | str, flag: str, reused: bool) -> None:
    models = tmp_path / "models"
    models.mkdir()
    write_model(models, gemma(llamaCpp={"parallelSlots": 1}, kvCache={"hostMemory": tier}))
    async with running(options(models, tmp_path / "state", model_cache)) as up:
        found = row(up.snapshot(), "gemma3-270m")
        args = _cmdline(found["pid"])
        assert args[args.index("--cache-ram") + 1] == flag  # what the engine was asked
        assert found["hostKvCache"] == ("1Gi" if reused else "0")
        client = openai.AsyncOpenAI(base_url=up.gateway_url, api_key="unused", max_retries=0)
        async with client:
            cached = []
            for prompt in (OPENINGS[0], OPENINGS[1], OPENINGS[0]):  # A, B takes the slot, A
                answer = await client.completions.create(model="gemma-3-270m", prompt=prompt,
                                                         max_tokens=1, temperature=0)
                assert answer.usage is not None
                details = answer.usage.prompt_tokens_details
                cached.append(details.cached_tokens if details else 0)
    assert cached[1] == 0  # B shares no beginning with A
    assert (cached[2] > 100) is reused, cached  # A's prompt back from host memory, or not


async def test_the_example_declares_its_tier(tmp_path: Path, model_cache: Path) -> None:
    """examples/kv-cache, served as its README says: llama-server keeps up to 1 GiB."""
    async with running(options(REPO / "examples" / "kv-cache", tmp_path / "state",
                               model_cache)) as up:
        found = row(up.snapshot(), "gemma3-270m-kv-tier")
        args = _cmdline(found["pid"])
        assert (found["phase"], args[args.index("--cache-ram") + 1]) == ("Ready", "1024")
