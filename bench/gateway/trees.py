"""The gateway of several source trees side by side: what a change cost or won back.

Run from the repository root with the project's virtualenv (needs `wrk`):

    .venv/bin/python bench/gateway/trees.py [--rounds 2] [--duration 8] [REV ...]

Each REV (a commit, default ``8c0a945`` (before flow control and traces, #38) and
``fdc4eb9`` (before the request path's parts, #50)) is checked out into a temporary
worktree; the working tree is always measured too. Every tree's ``llmop gateway`` runs with
this virtualenv and its own ``src`` first on the path, with bench/gateway/run.py's layout:
the gateway pinned to CPU 0, the fake upstream (0 ms) and wrk to CPU 1. The trees take
turns within each round, the direct path measured in every round too, so a drifting
machine shifts all of them alike; the table shows medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from run import (
    LOAD_CPU,
    PROXY_CPU,
    REPO,
    pinned,
    rss_mb,
    started,
    ttfb,
    wait_ready,
    wrk,
)
from run import free_port as port

HERE = Path(__file__).resolve().parent
FLOORS = ("floor_aiohttp_http1.py", "floor_front_http1.py", "floor_raw_http1.py")
BASELINES = ("8c0a945", "fdc4eb9")
WORKING = "working tree"


def measure(url: str, seconds: int, *, streams: bool = True) -> dict[str, float]:
    """``streams``: whether it relays a stream as it comes (the floors do not: no figure)."""
    wrk(url, 10, 2)  # warm-up
    one, fifty = wrk(url, 1, seconds), wrk(url, 50, seconds)
    return {"p50": one["p50"], "p99": one["p99"], "rps50": fifty["rps"],
            "ttfb": asyncio.run(ttfb(url)) if streams else math.nan,
            "errors": one["errors"] + fifty["errors"]}


def worktree(rev: str, into: Path) -> Path:
    path = into / rev
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(path),
                    rev], check=True)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("revs", nargs="*", default=list(BASELINES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--floors", action="store_true", help="also the hot path alone, in "
                        "the same layout, on aiohttp's server, on an httptools front "
                        "answering with aiohttp's responses and on a bare asyncio+httptools "
                        "server (floor_*_http1.py): what any Python proxy adds here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmop-trees-"))
    trees = {rev: worktree(rev, work) for rev in args.revs}
    trees[WORKING] = REPO
    up_port = port()
    direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    floors = [HERE / f for f in FLOORS] if args.floors else []
    samples: dict[str, list[dict[str, float]]] = {
        name: [] for name in ["direct", *trees, *(f.name for f in floors)]}
    try:
        with started(pinned(LOAD_CPU, [sys.executable, str(HERE / "upstream.py"),
                                       str(up_port), "0"])):
            wait_ready(direct, 10)
            for round_ in range(args.rounds):
                print(f"round {round_ + 1}: direct", flush=True)
                samples["direct"].append(measure(direct, args.duration))
                for name, tree in trees.items():
                    samples[name].append(one_tree(tree, up_port, args.duration))
                    print(f"round {round_ + 1}: {name} {samples[name][-1]}", flush=True)
                for floor in floors:
                    samples[floor.name].append(one_floor(floor, up_port, args.duration))
                    print(f"round {round_ + 1}: {floor.name} {samples[floor.name][-1]}",
                          flush=True)
    finally:
        for rev in args.revs:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(work / rev)], check=False)
    print(table(samples, args.rounds, args.duration))


def one_tree(tree: Path, up_port: int, seconds: int) -> dict[str, float]:
    gw_port = port()
    config = Path(tempfile.mkdtemp(prefix="llmop-tree-")) / "gateway.yaml"
    config.write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": gw_port},
        "routes": [{"models": ["bench"], "upstream": {
            "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
            "apiKey": {"env": "BENCH_KEY"}}}]}))
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    argv = [sys.executable, "-m", "llm_operator", "gateway", "--config", str(config),
            "--log-level", "warning"]
    with started(pinned(PROXY_CPU, argv), {"BENCH_KEY": "sk-bench",
                                           "PYTHONPATH": str(tree / "src")}) as proc:
        wait_ready(url, 60)
        result = measure(url, seconds)
        result["rss"] = rss_mb(proc.pid)
    return result


def one_floor(script: Path, up_port: int, seconds: int) -> dict[str, float]:
    """A floor (``script PORT UPSTREAM_URL``) in the gateway's place: the same layout."""
    gw_port = port()
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    argv = [sys.executable, str(script), str(gw_port),
            f"http://127.0.0.1:{up_port}/v1/chat/completions"]
    with started(pinned(PROXY_CPU, argv), {"PYTHONPATH": str(REPO / "src")}) as proc:
        wait_ready(url, 60)
        result = measure(url, seconds, streams=False)
        result["rss"] = rss_mb(proc.pid)
    return result


def table(samples: dict[str, list[dict[str, float]]], rounds: int, seconds: int) -> str:
    def median(name: str, key: str) -> float:
        return statistics.median(s[key] for s in samples[name])

    lines = [f"Medians of {rounds} round(s); fake upstream 0 ms; wrk -t1, {seconds} s per "
             "level; gateway on CPU 0, upstream and wrk on CPU 1.", "",
             "| tree | added p50 ms (c=1) | added p99 ms (c=1) | req/s c=50 | vs direct "
             "| stream first chunk, added ms | RSS MB | errors |",
             "|---|---|---|---|---|---|---|---|"]
    base = {key: median("direct", key) for key in ("p50", "p99", "rps50", "ttfb")}
    lines.append(f"| direct (no proxy): p50 {base['p50']:.2f}, p99 {base['p99']:.2f} | - | - "
                 f"| {base['rps50']:.0f} | 1.00x | (first chunk {base['ttfb']:.2f}) | - | - |")
    for name, runs in samples.items():
        if name == "direct":
            continue
        lines.append(
            f"| {name} | {median(name, 'p50') - base['p50']:+.2f} | "
            f"{median(name, 'p99') - base['p99']:+.2f} | {median(name, 'rps50'):.0f} | "
            f"{median(name, 'rps50') / base['rps50']:.2f}x | "
            f"{median(name, 'ttfb') - base['ttfb']:+.2f} | {median(name, 'rss'):.0f} | "
            f"{sum(s['errors'] for s in runs):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
