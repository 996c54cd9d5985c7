"""Batch API benchmark on the real node: an interactive client's latency while a batch runs.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it serves the Gemma 3 270M example (one llama.cpp slot); config/redis and
config/router-batch (two router replicas) are applied as the e2e suite applies them. One
interactive client sends short chat completions one after another through the router's
Service, with `x-gateway-inference-objective: interactive`:

- **alone** (the baseline): nothing else runs;
- **beside a batch**: a batch of ``--lines`` requests (the same size) runs, created with
  the OpenAI SDK, in the batch band.

It prints the interactive client's p50 and p99 in both cases (and their ratio), and the
batch's requests per second and time to finish.

    python bench/batch/run.py [--lines 1000] [--requests 60] [--max-tokens 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "tools")]

import openai  # noqa: E402
from e2e_cluster import (  # noqa: E402
    GEMMA,
    GEMMA_ID,
    GEMMA_NAME,
    MODELS_NS,
    OPERATOR_NS,
    install_batching,
    installed,
)

INTERACTIVE = {"x-gateway-inference-objective": "interactive"}
FINISHED = {"completed", "failed", "expired", "cancelled"}


def body(index: int, max_tokens: int) -> dict[str, object]:
    """One request (interactive or a batch line): the same size, every answer as long."""
    return {"model": GEMMA_ID, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True,
            "messages": [{"role": "user", "content": f"Say a word for {index}."}]}


async def interactive(sdk: openai.AsyncOpenAI, requests: int, max_tokens: int
                      ) -> list[float]:
    """Seconds per request, one after another."""
    out = []
    for index in range(requests):
        started = time.perf_counter()
        request = body(index, max_tokens)
        await sdk.chat.completions.create(
            model=GEMMA_ID, messages=request["messages"],  # type: ignore[arg-type]
            max_tokens=max_tokens, temperature=0, extra_body={"ignore_eos": True},
            extra_headers=INTERACTIVE)
        out.append(time.perf_counter() - started)
    return out


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return statistics.median(samples), cuts[98]


async def measure(base: str, lines: int, requests: int, max_tokens: int) -> None:
    async with openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300,
                                  max_retries=2) as sdk:
        await interactive(sdk, 5, max_tokens)  # warm-up
        alone = await interactive(sdk, requests, max_tokens)
        data = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST",
                                   "url": "/v1/chat/completions",
                                   "body": body(i, max_tokens)}) + "\n"
                       for i in range(lines)).encode()
        uploaded = await sdk.files.create(file=("bench.jsonl", data), purpose="batch")
        batch = await sdk.batches.create(input_file_id=uploaded.id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
        started = time.perf_counter()
        while (current := await sdk.batches.retrieve(batch.id)).status == "validating" or \
                not current.request_counts or current.request_counts.completed < 5:
            await asyncio.sleep(0.5)  # until the batch is well under way
        beside = await interactive(sdk, requests, max_tokens)
        while (current := await sdk.batches.retrieve(batch.id)).status not in FINISHED:
            await asyncio.sleep(1)
        took = time.perf_counter() - started
    counts = current.request_counts
    assert counts is not None
    (a50, a99), (b50, b99) = quantiles(alone), quantiles(beside)
    print(f"\nGemma 3 270M (one llama.cpp slot) on the 2-core test node, two router "
          f"replicas; {requests} interactive requests of {max_tokens} tokens, one after "
          f"another; a batch of {lines} such requests\n")
    print("| interactive client | p50 (s) | p99 (s) | p50 vs alone | p99 vs alone |")
    print("|---|---|---|---|---|")
    print(f"| alone (baseline) | {a50:.3f} | {a99:.3f} | 1.00x | 1.00x |")
    print(f"| beside the batch | {b50:.3f} | {b99:.3f} | {b50 / a50:.2f}x | "
          f"{b99 / a99:.2f}x |")
    print(f"\nbatch: {current.status}, {counts.completed} completed, {counts.failed} failed, "
          f"{took:.0f} s ({counts.completed / took:.2f} requests/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.kubectl("apply", "-f", str(GEMMA))
        cluster.wait_phase(MODELS_NS, GEMMA_NAME, "Ready", 180)
        install_batching(cluster)
        base = cluster.service_url(OPERATOR_NS, "llmop-router", 8080)
        asyncio.run(measure(base, args.lines, args.requests, args.max_tokens))


if __name__ == "__main__":
    main()
