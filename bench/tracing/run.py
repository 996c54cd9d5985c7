"""Tracing benchmark: what exporting traces adds to the gateway at 50 connections.

The fast upstream of bench/gateway, and `llmop gateway` on the same route: tracing off
(the baseline), on with every trace recorded, and on with 10% and 1% samples. The
traced gateways export over OTLP/HTTP to a sink on loopback that decodes nothing (a
collector's cost is not the gateway's). wrk drives 50 connections, against an upstream
answering at once (the gateway saturated: what tracing costs in throughput) and in 50 ms
(the gateway below saturation, as in front of a model: what it adds to each request);
and the CPU time each request costs the gateway's process and its span export child.
Rounds alternate so that drift hits every path alike; medians of p50, p99 and requests
per second. The gateway is pinned to CPU 0 and its export child inherits that CPU (at
saturation the two share one core); the upstream, the sink and wrk run on CPU 1
(bench/gateway's layout).

    .venv/bin/python bench/tracing/run.py [--rounds 3] [--duration 8] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LLMOP = str(ROOT / ".venv/bin/llmop")
CONNECTIONS = 50

_spec = importlib.util.spec_from_file_location("gateway_bench", ROOT / "bench/gateway/run.py")
assert _spec is not None and _spec.loader is not None
gateway_bench = importlib.util.module_from_spec(_spec)
sys.modules["gateway_bench"] = gateway_bench  # its dataclasses look their module up
_spec.loader.exec_module(gateway_bench)

SINK = """
import sys
from aiohttp import web
async def traces(request):
    await request.read()
    return web.Response(content_type="application/x-protobuf")
app = web.Application(client_max_size=64 * 1024 * 1024)
app.router.add_post("/v1/traces", traces)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""
MODES = {"off (baseline)": None, "on, every trace": 1.0, "on, 10% sampled": 0.1,
         "on, 1% sampled": 0.01}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--latency-ms", type=float, action="append",
                        help="the upstream's answer time (repeatable; default: 0 and 50)")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is required: apt-get install wrk")
    for latency in args.latency_ms or [0.0, 50.0]:
        run(latency, args.rounds, args.duration)


def run(latency: float, rounds: int, duration: int) -> None:
    """Every mode at one upstream latency: alternating rounds, then the table."""
    gb = gateway_bench
    up_port, sink_port = gb.free_port(), gb.free_port()
    ports = {mode: gb.free_port() for mode in MODES}
    route = {"models": ["bench"], "upstream": {
        "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
        "apiKey": {"env": "BENCH_KEY"}}}
    work = Path(tempfile.mkdtemp(prefix="llmop-bench-tracing-"))
    argvs = []
    for index, (mode, ratio) in enumerate(MODES.items()):
        config: dict[str, object] = {"listen": {"host": "127.0.0.1", "port": ports[mode]},
                                     "routes": [route]}
        if ratio is not None:
            config["tracing"] = {"endpoint": f"http://127.0.0.1:{sink_port}/v1/traces",
                                 "sampleRatio": ratio}
        path = work / f"gateway-{index}.yaml"
        path.write_text(json.dumps(config))
        argvs.append((mode, [LLMOP, "gateway", "--config", str(path), "--log-level",
                             "warning"]))
    results: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    upstream = [sys.executable, str(ROOT / "bench/gateway/upstream.py"), str(up_port),
                str(latency)]
    with gb.started(gb.pinned(gb.LOAD_CPU, upstream)), \
            gb.started(gb.pinned(gb.LOAD_CPU, [sys.executable, "-c", SINK, str(sink_port)])):
        gb.wait_ready(f"http://127.0.0.1:{up_port}/v1/chat/completions", 10)
        for _ in range(rounds):
            for mode, argv in argvs:  # one gateway at a time on CPU 0
                url = f"http://127.0.0.1:{ports[mode]}/v1/chat/completions"
                with gb.started(gb.pinned(gb.PROXY_CPU, argv), {"BENCH_KEY": "sk-bench"}
                                ) as gateway:
                    gb.wait_ready(url, 60)
                    gb.wrk(url, 10, 2)  # warm-up (and the export child started)
                    before = cpu_seconds(gateway.pid)
                    result = gb.wrk(url, CONNECTIONS, duration)
                    after = cpu_seconds(gateway.pid)
                    served = result["rps"] * duration
                    result["cpu_us"] = (after[0] - before[0]) / served * 1e6
                    result["child_us"] = (after[1] - before[1]) / served * 1e6
                    results[mode].append(result)
                    print(f"  {mode}: {results[mode][-1]}", flush=True)
    base = {k: statistics.median(r[k] for r in results["off (baseline)"])
            for k in ("p50", "p99", "rps")}
    print(f"\nupstream {latency:g} ms; wrk -c{CONNECTIONS}, {duration} s x {rounds} rounds, "
          "medians; gateway on CPU 0\n")
    print("| tracing | p50 (ms) | added p50 (ms) | p99 (ms) | req/s | vs baseline | "
          "gateway CPU µs/req | export child CPU µs/req |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in MODES:
        med = {k: statistics.median(r[k] for r in results[mode])
               for k in ("p50", "p99", "rps", "cpu_us", "child_us")}
        print(f"| {mode} | {med['p50']:.2f} | {med['p50'] - base['p50']:+.2f} | "
              f"{med['p99']:.2f} | {med['rps']:.0f} | {med['rps'] / base['rps']:.2f}x | "
              f"{med['cpu_us']:.0f} | {med['child_us']:.0f} |")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """CPU seconds the gateway has used, and its live children (the export child)."""
    def used(process: int) -> float:
        fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return used(pid), sum(used(int(child)) for child in children)


if __name__ == "__main__":
    main()
