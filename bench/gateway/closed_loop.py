"""The gateway's added latency as a Python client sees it: one request at a time, alternating.

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/gateway/closed_loop.py [--requests 300] [--rounds 3]
        [--upstream-latency-ms 0 50]

A second honest method beside wrk (bench/gateway/run.py): an aiohttp client sends chat
completions one after another (a closed loop, one connection kept alive), ``--requests``
straight to the fake upstream (bench/gateway/upstream.py), then as many through `llmop
gateway`, and again, ``--rounds`` times: both paths see the same machine at nearly the
same moment. The gateway is pinned to CPU 0, the upstream and the client to CPU 1, as in
run.py. Prints per upstream latency: the p50 and p99 of each path and the gateway's added
p50 and p99 (medians over the rounds), and the client's own CPU per request, which is
part of every figure a Python client reads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import REPO, free_port, pinned, started, wait_ready  # noqa: E402

PROXY_CPU, LOAD_CPU = "0", "1"
BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "Hello!"}],
                   "max_tokens": 8}).encode()


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def closed_loop(url: str, count: int) -> tuple[list[float], float]:
    """Milliseconds of ``count`` sequential POSTs, and the client's CPU µs per request.

    30 requests warm the connection and both ends first.
    """
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench"}
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as http:
        for _ in range(30):
            async with http.post(url, data=BODY, headers=headers) as resp:
                await resp.read()
        took = []
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        for _ in range(count):
            started_at = time.perf_counter()
            async with http.post(url, data=BODY, headers=headers) as resp:
                await resp.read()
                assert resp.status == 200, resp.status
            took.append((time.perf_counter() - started_at) * 1000)
        after = resource.getrusage(resource.RUSAGE_SELF)
    used = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    return took, used / count * 1e6


def run_latency(latency: float, requests: int, rounds: int) -> list[str]:
    up_port, gw_port = free_port(), free_port()
    work = Path(tempfile.mkdtemp(prefix="llmop-closed-loop-"))
    (work / "gateway.yaml").write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": gw_port}, "routes": [{
            "models": ["bench"], "upstream": {
                "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
                "apiKey": {"env": "BENCH_KEY"}}}]}))
    direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    gateway = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    rows: dict[str, list[tuple[float, float, float]]] = {"direct": [], "gateway": []}
    with started(pinned(LOAD_CPU, [sys.executable, str(HERE / "upstream.py"), str(up_port),
                                   str(latency)])), \
            started(pinned(PROXY_CPU, [str(REPO / ".venv/bin/llmop"), "gateway", "--config",
                                       str(work / "gateway.yaml"), "--log-level",
                                       "warning"]), {"BENCH_KEY": "sk-bench"}):
        wait_ready(gateway, 60)
        for _ in range(rounds):
            for name, url in (("direct", direct), ("gateway", gateway)):
                took, cpu = asyncio.run(closed_loop(url, requests))
                rows[name].append((p(took, 0.5), p(took, 0.99), cpu))
    med = {name: [statistics.median(r[i] for r in measured) for i in range(3)]
           for name, measured in rows.items()}
    added50 = statistics.median(g[0] - d[0] for g, d in zip(rows["gateway"], rows["direct"],
                                                             strict=True))
    added99 = statistics.median(g[1] - d[1] for g, d in zip(rows["gateway"], rows["direct"],
                                                             strict=True))
    return [f"| {latency:g} ms | direct | {med['direct'][0]:.3f} | {med['direct'][1]:.3f} | "
            f"- | - | {med['direct'][2]:.0f} |",
            f"| {latency:g} ms | llm-operator gateway | {med['gateway'][0]:.3f} | "
            f"{med['gateway'][1]:.3f} | +{added50:.3f} | +{added99:.3f} | "
            f"{med['gateway'][2]:.0f} |"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--upstream-latency-ms", type=float, nargs="+", default=[0.0, 50.0])
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {int(LOAD_CPU)})
    lines = []
    for latency in args.upstream_latency_ms:
        lines += run_latency(latency, args.requests, args.rounds)
    print(f"\nA closed-loop aiohttp client, {args.requests} sequential chat completions per "
          f"path, {args.rounds} rounds alternating direct and gateway; gateway on CPU "
          f"{PROXY_CPU}, upstream and client on CPU {LOAD_CPU}; {os.cpu_count()} CPUs; "
          "medians over the rounds.\n")
    print("| upstream latency | path | p50 ms | p99 ms | added p50 ms | added p99 ms | "
          "client CPU µs/request |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
