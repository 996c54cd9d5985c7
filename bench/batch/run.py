"""Batch API benchmark on the real node: an interactive client's latency while a batch runs.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it serves the Gemma 3 270M example with ``--slots`` llama.cpp slots (default 4);
config/redis and config/router-batch (two router replicas) are applied as the e2e suite
applies them. One interactive client sends short chat completions one after another
through the router's Service, with `x-gateway-inference-objective: interactive`:

- **alone** (the baseline): nothing else runs;
- **beside a batch**: a batch of ``--lines`` requests (the same size) runs, created with
  the OpenAI SDK, in the batch band, as shipped (``maxShare: 0.5``: the batch band holds
  at most half of the runner's router replica's share of the slots);
- **beside the batch, idle only**: the same batch goes on after the routers restart with
  the batch band's ``idleSeconds: 1`` as well (it takes a slot only once no interactive
  request has been in flight for a second);
- **beside the batch, no cap**: again after a restart, with ``maxShare: 1`` and no
  ``idleSeconds`` (the batch band may hold every slot of its replica's share).

It prints the interactive client's p50 and p99 in each case (and their ratio to alone),
and the batch's requests per second and time to finish (both phases together).

    python bench/batch/run.py [--lines 1000] [--requests 60] [--max-tokens 8] [--slots 4]
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
import yaml  # noqa: E402
from e2e_cluster import (  # noqa: E402
    GEMMA,
    GEMMA_ID,
    GEMMA_NAME,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
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


def batch_band(cluster: NodeCluster, **fields: float) -> None:
    """The routers' batch band given ``fields`` (maxShare, idleSeconds); routers restarted."""
    settings = yaml.safe_load(cluster.kubectl(
        "-n", OPERATOR_NS, "get", "configmap", "llmop-router-settings", "-o",
        "jsonpath={.data.settings\\.yaml}"))
    for band in settings["flowControl"]["bands"]:
        if band["name"] == "batch":
            band.update(fields)
    patch = {"data": {"settings.yaml": yaml.safe_dump(settings)}}
    cluster.kubectl("-n", OPERATOR_NS, "patch", "configmap", "llmop-router-settings",
                    "--type=merge", "-p", json.dumps(patch))
    cluster.kubectl("-n", OPERATOR_NS, "rollout", "restart", "deployment/llmop-router")
    cluster.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                    "--timeout=180s")


async def progress(sdk: openai.AsyncOpenAI, batch_id: str, at_least: int) -> int:
    """Until the batch has ``at_least`` requests completed (the routers may be restarting)."""
    while True:
        try:
            current = await sdk.batches.retrieve(batch_id)
        except (openai.APIConnectionError, openai.InternalServerError):
            current = None
        done = current.request_counts.completed if current and current.request_counts \
            else 0
        if done >= at_least:
            return done
        await asyncio.sleep(0.5)  # the batch runs in another process: poll it


async def measure(cluster: NodeCluster, base: str, args: argparse.Namespace) -> None:
    requests, max_tokens = args.requests, args.max_tokens
    async with openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300,
                                  max_retries=2) as sdk:
        await interactive(sdk, 5, max_tokens)  # warm-up
        alone = await interactive(sdk, requests, max_tokens)
        data = "".join(json.dumps({"custom_id": f"r{i}", "method": "POST",
                                   "url": "/v1/chat/completions",
                                   "body": body(i, max_tokens)}) + "\n"
                       for i in range(args.lines)).encode()
        uploaded = await sdk.files.create(file=("bench.jsonl", data), purpose="batch")
        batch = await sdk.batches.create(input_file_id=uploaded.id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
        started = time.perf_counter()
        done = await progress(sdk, batch.id, 5)  # until the batch is well under way
        capped = await interactive(sdk, requests, max_tokens)
        await asyncio.to_thread(batch_band, cluster, idleSeconds=1.0)
        done = await progress(sdk, batch.id, done + 5)  # the new leader runs it
        idle = await interactive(sdk, requests, max_tokens)
        await asyncio.to_thread(batch_band, cluster, maxShare=1.0, idleSeconds=0.0)
        done = await progress(sdk, batch.id, done + 5)
        uncapped = await interactive(sdk, requests, max_tokens)
        while (current := await sdk.batches.retrieve(batch.id)).status not in FINISHED:
            await asyncio.sleep(1)
        took = time.perf_counter() - started
    counts = current.request_counts
    assert counts is not None
    a50, a99 = quantiles(alone)
    print(f"\nGemma 3 270M ({args.slots} llama.cpp slots) on the 2-core test node, two "
          f"router replicas; {requests} interactive requests of {max_tokens} tokens, one "
          f"after another; a batch of {args.lines} such requests\n")
    print("| interactive client | p50 (s) | p99 (s) | p50 vs alone | p99 vs alone |")
    print("|---|---|---|---|---|")
    for name, samples in (("alone (baseline)", alone),
                          ("beside the batch, maxShare 0.5 (shipped)", capped),
                          ("beside the batch, maxShare 0.5, idleSeconds 1", idle),
                          ("beside the batch, maxShare 1 (no cap)", uncapped)):
        p50, p99 = quantiles(samples)
        print(f"| {name} | {p50:.3f} | {p99:.3f} | {p50 / a50:.2f}x | {p99 / a99:.2f}x |")
    print(f"\nbatch: {current.status}, {counts.completed} completed, {counts.failed} failed, "
          f"{took:.0f} s ({counts.completed / took:.2f} requests/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--max-tokens", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4, help="Gemma's llamaCpp.parallelSlots")
    args = parser.parse_args()
    model = yaml.safe_load(GEMMA.read_text())
    model["spec"]["llamaCpp"] = {"parallelSlots": args.slots}
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(model))
        cluster.wait_phase(MODELS_NS, GEMMA_NAME, "Ready", 180)
        install_batching(cluster)
        base = cluster.service_url(OPERATOR_NS, "llmop-router", 8080)
        asyncio.run(measure(cluster, base, args))


if __name__ == "__main__":
    main()
