"""A small guarded request beside a large one: its latency alone (the baseline) and beside.

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/guardrails/hostile.py [--requests 200] [--rounds 3]

``llmop gateway`` (pinned to CPU 0) serves one route with a masking PII guard on its input
to the fake upstream (bench/gateway/upstream.py, CPU 1). One client sends small guarded
chat completions one after another (a 90-character prompt with an e-mail address and a
card number), first alone (the baseline), then while a second client sends, back to
back, one of:

- ``1 MB moderation``: a /v1/moderations input of a card number 50,000 times (950 KB);
- ``1 MB chat``: the same as a chat message;
- ``64 K chat``: the largest text the guard reads by default (``maxCheckedChars``), dense
  with card numbers: analyzed in pieces, which the small requests take turns with.

Prints, per load: the small requests' p50 and p99 and their ratio to the baseline in the
same round, and how long the large requests took to be answered (median): refused (413)
or checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
GATEWAY_BENCH = HERE.parent / "gateway"
sys.path.insert(0, str(GATEWAY_BENCH))
from run import REPO, free_port, pinned, started, wait_ready  # noqa: E402

PROXY_CPU, LOAD_CPU = "0", "1"
SMALL = "Please write to jane.doe@example.com and charge card 4111 1111 1111 1111 today."
CARD = "4111 1111 1111 1111 "
LOADS = {
    "1 MB moderation": ("/v1/moderations", {"model": "guarded", "input": CARD * 50_000}),
    "1 MB chat": ("/v1/chat/completions", {"model": "guarded", "max_tokens": 4, "messages": [
        {"role": "user", "content": CARD * 50_000}]}),
    "64 K chat": ("/v1/chat/completions", {"model": "guarded", "max_tokens": 4, "messages": [
        {"role": "user", "content": CARD * 3270}]}),
}


def config(port: int, upstream: int) -> dict[str, object]:
    guard = {"name": "no-pii", "action": "mask", "pii": {}}
    return {"listen": {"host": "127.0.0.1", "port": port}, "routes": [{
        "models": ["guarded", "bench"], "upstream": {
            "baseUrl": f"http://127.0.0.1:{upstream}/v1", "model": "bench-upstream",
            "apiKey": {"env": "BENCH_KEY"}}, "guardrails": {"input": [guard]}}]}


async def smalls(http: aiohttp.ClientSession, base: str, count: int) -> list[float]:
    body = {"model": "guarded", "max_tokens": 4,
            "messages": [{"role": "user", "content": SMALL}]}
    took = []
    for _ in range(count):
        started_at = time.perf_counter()
        async with http.post(f"{base}/v1/chat/completions", json=body) as resp:
            await resp.read()
            assert resp.status == 200, resp.status
        took.append((time.perf_counter() - started_at) * 1000)
    return took


async def beside(base: str, count: int, load: tuple[str, dict[str, object]] | None
                 ) -> tuple[list[float], list[tuple[int, float]]]:
    """The small requests' milliseconds, and each large request's (status, seconds)."""
    large: list[tuple[int, float]] = []
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as http, \
            aiohttp.ClientSession(timeout=timeout) as other:
        stop = asyncio.Event()

        async def loader() -> None:
            assert load is not None
            path, body = load
            sent = json.dumps(body).encode()  # once: the client's own CPU is not measured
            headers = {"Content-Type": "application/json"}
            while not stop.is_set():
                started_at = time.perf_counter()
                async with other.post(base + path, data=sent, headers=headers) as resp:
                    await resp.read()
                    large.append((resp.status, time.perf_counter() - started_at))

        task = asyncio.create_task(loader()) if load is not None else None
        if task is not None:
            while not large and not task.done():  # the first large one under way
                await asyncio.sleep(0.05)
        took = await smalls(http, base, count)
        stop.set()
        if task is not None:
            await task
    return took, large


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="small ones per load")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    up_port, gw_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="llmop-hostile-bench-"))
    (work / "gateway.yaml").write_text(json.dumps(config(gw_port, up_port)))
    base = f"http://127.0.0.1:{gw_port}"
    rows: dict[str, list[tuple[float, float, float, float, str]]] = {}
    with started(pinned(LOAD_CPU, [sys.executable, str(GATEWAY_BENCH / "upstream.py"),
                                   str(up_port), "0"])), \
            started(pinned(PROXY_CPU, [str(REPO / ".venv/bin/llmop"), "gateway", "--config",
                                       str(work / "gateway.yaml"), "--log-level", "warning"]),
                    {"BENCH_KEY": "sk-bench"}):
        wait_ready(f"{base}/v1/chat/completions", 60)
        asyncio.run(beside(base, 50, None))  # warm: the detector built, the path hot
        for round_ in range(args.rounds):
            alone, _ = asyncio.run(beside(base, args.requests, None))
            base50, base99 = p(alone, 0.5), p(alone, 0.99)
            rows.setdefault("alone", []).append((base50, base99, 1.0, 1.0, "-"))
            for name, load in LOADS.items():
                took, large = asyncio.run(beside(base, args.requests, load))
                statuses = sorted({s for s, _ in large})
                big = statistics.median(t for _, t in large) if large else float("nan")
                rows.setdefault(name, []).append((
                    p(took, 0.5), p(took, 0.99), p(took, 0.5) / base50,
                    p(took, 0.99) / base99,
                    f"{len(large)} x {statuses}, median {big:.3f} s"))
                print(f"round {round_ + 1} {name}: small p50 {p(took, 0.5):.2f} ms p99 "
                      f"{p(took, 0.99):.2f} ms; large {rows[name][-1][4]}", flush=True)
    print(f"\nA small guarded request beside a large one: `llmop gateway` on CPU {PROXY_CPU}, "
          f"fake upstream and clients on CPU {LOAD_CPU}; {os.cpu_count()} CPUs; "
          f"{args.requests} small requests per load, medians of {args.rounds} rounds; "
          "ratios against the small requests alone in the same round.\n")
    print("| beside | small p50 ms | small p99 ms | p50 vs alone | p99 vs alone | "
          "the large requests (status, time to answer) |")
    print("|---|---|---|---|---|---|")
    for name, measured in rows.items():
        med = [statistics.median(m[i] for m in measured) for i in range(4)]
        print(f"| {name} | {med[0]:.2f} | {med[1]:.2f} | {med[2]:.2f}x | {med[3]:.2f}x | "
              f"{measured[-1][4]} |")


if __name__ == "__main__":
    main()
