"""Guardrails' cost: one gateway, the same route with and without PII guards (the baseline).

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/guardrails/run.py [--seconds 5] [--rounds 3]

``llmop gateway`` (pinned to CPU 0) serves three routes to one fake upstream
(bench/gateway/upstream.py, CPU 1): ``plain`` (no guardrails, the baseline), ``input``
(an input guard that masks every default PII type) and ``both`` (the same on input and
output). Closed-loop clients (aiohttp, CPU 1) send chat completions for a fixed time; the
routes take turns within each round, so drift on a shared machine hits all alike. Prompts:
a short one (~90 characters), a 2 KB one and a long one (~4,000) with an e-mail address
and a card number in them, and a short one with nothing personal (no digit, no ``@``).
Prints a Markdown table: medians over the rounds, and each guarded route's ratio to
``plain`` in the same run.
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
ROUTES = ("plain", "input", "both")
SHORT = "Please write to jane.doe@example.com and charge card 4111 1111 1111 1111 for order 7."
FILLER = ("The quarterly report covers revenue, costs and the outlook for the next year. ")
PROSE = "Write a short story about a lighthouse keeper who befriends a storm petrel."
PROMPTS = {"short": SHORT, "2kb": FILLER * 12 + SHORT + " " + FILLER * 12,
           "long": FILLER * 25 + SHORT + " " + FILLER * 25,
           "prose": PROSE}  # nothing personal, no digits, no @: the common case
GUARD = {"name": "no-pii", "action": "mask", "pii": {}}


def config(port: int, upstream: int) -> dict[str, object]:
    def route(name: str, rails: dict[str, object] | None) -> dict[str, object]:
        names = [name, "bench"] if rails is None else [name]  # wait_ready asks for "bench"
        return {"models": names, "upstream": {
            "baseUrl": f"http://127.0.0.1:{upstream}/v1", "model": "bench-upstream",
            "apiKey": {"env": "BENCH_KEY"}}, **({"guardrails": rails} if rails else {})}
    return {"listen": {"host": "127.0.0.1", "port": port}, "routes": [
        route("plain", None), route("input", {"input": [GUARD]}),
        route("both", {"input": [GUARD], "output": [GUARD]})]}


async def load(url: str, model: str, prompt: str, clients: int, seconds: float
               ) -> tuple[float, float]:
    """(requests per second, median latency in ms) of ``clients`` closed-loop clients."""
    body = json.dumps({"model": model, "max_tokens": 16,
                       "messages": [{"role": "user", "content": prompt}]})
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def client(http: aiohttp.ClientSession) -> None:
        while time.monotonic() < deadline:
            started_at = time.perf_counter()
            async with http.post(url, data=body,
                                 headers={"Content-Type": "application/json"}) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            latencies.append((time.perf_counter() - started_at) * 1000)

    began = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    return len(latencies) / (time.monotonic() - began), statistics.median(latencies)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5, help="per route, level and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 16])
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    up_port, gw_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="llmop-guard-bench-"))
    (work / "gateway.yaml").write_text(json.dumps(config(gw_port, up_port)))
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    results: dict[tuple[str, str, int], list[tuple[float, float]]] = {}
    with started(pinned(LOAD_CPU, [sys.executable, str(GATEWAY_BENCH / "upstream.py"),
                                   str(up_port), "0"])), \
            started(pinned(PROXY_CPU, [str(REPO / ".venv/bin/llmop"), "gateway", "--config",
                                       str(work / "gateway.yaml"), "--log-level", "warning"]),
                    {"BENCH_KEY": "sk-bench"}):
        wait_ready(url, 60)
        for route in ROUTES:  # warm: the detector is built, each route's path is hot
            asyncio.run(load(url, route, PROMPTS["long"], 4, 1.0))
        for round_ in range(args.rounds):
            for prompt, text in PROMPTS.items():
                for clients in args.clients:
                    for route in ROUTES:
                        measured = asyncio.run(load(url, route, text, clients,
                                                    args.seconds))
                        results.setdefault((prompt, route, clients), []).append(measured)
                        print(f"round {round_ + 1} {prompt} c={clients} {route}: "
                              f"{measured[0]:.0f} req/s, p50 {measured[1]:.2f} ms", flush=True)
    print(f"\nGuardrails' cost, `llmop gateway` on CPU {PROXY_CPU}, fake upstream and clients "
          f"on CPU {LOAD_CPU}; {os.cpu_count()} CPUs; medians of {args.rounds} rounds of "
          f"{args.seconds:g} s. plain: no guardrails (the baseline); input: a masking PII "
          "guard on the request; both: on the request and the answer.\n")
    print("| prompt | clients | route | req/s | vs plain | p50 ms | vs plain |")
    print("|---|---|---|---|---|---|---|")
    for prompt, text in PROMPTS.items():
        for clients in args.clients:
            base_rps = statistics.median(r for r, _ in results[(prompt, "plain", clients)])
            base_p50 = statistics.median(p for _, p in results[(prompt, "plain", clients)])
            for route in ROUTES:
                rps = statistics.median(r for r, _ in results[(prompt, route, clients)])
                p50 = statistics.median(p for _, p in results[(prompt, route, clients)])
                print(f"| {prompt} ({len(text)} chars) | {clients} | {route} | "
                      f"{rps:.0f} | {rps / base_rps:.2f}x | {p50:.2f} | "
                      f"{p50 / base_p50:.2f}x |")


if __name__ == "__main__":
    main()
