"""The gateway of several source trees side by side: what a change cost or won back.

Run from the repository root with the project's virtualenv (needs `wrk`):

    .venv/bin/python bench/gateway/trees.py [--rounds 2] [--duration 8] [--floors]
        [--python /usr/bin/python3.11] [--c1-cycles 8] [REV ...]

Each REV (a commit, default ``8c0a945`` (before flow control and traces) and
``fdc4eb9`` (before the request path's parts)) is checked out into a temporary
worktree; the working tree is always measured too. Every tree's ``llmop gateway`` runs with
this virtualenv and its own ``src`` first on the path, with bench/gateway/run.py's layout:
the gateway pinned to CPU 0, the fake upstream (0 ms) and wrk to CPU 1. The trees take
turns within each round, the direct path measured in every round too, so a drifting
machine shifts all of them alike; the table shows medians over the rounds. ``--python``
serves every tree and floor a second time with another interpreter (this virtualenv's
packages after its ``src``): the host's Python may be built unlike the one users run.
``--c1-cycles`` then starts every gateway and floor at once and measures one client on each
in turn, cycle after cycle: at one client the host's drift within a round is as large as
the differences sought, and cycles of short runs spread it over all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from run import (
    LOAD_CPU,
    PROXY_CPU,
    REPO,
    interpreter,
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
    parser.add_argument("--python", action="append", default=[], help="also serve every "
                        "gateway and floor with this Python and this virtualenv's packages "
                        "(e.g. /usr/bin/python3.11: Debian's, which the router image ships); "
                        "the upstream stays on this one. Repeatable")
    parser.add_argument("--c1-cycles", type=int, default=0, metavar="N", help="then every "
                        "gateway and floor at once, idle but one, and N cycles of one "
                        "client for --c1-seconds on each in turn, the direct path too: "
                        "the added p50 and p99 with the host's drift spread over all of them")
    parser.add_argument("--c1-seconds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmop-trees-"))
    checkouts = {rev: worktree(rev, work) for rev in args.revs}
    checkouts[WORKING] = REPO
    pythons: list[str | None] = [None, *args.python]
    trees = {served(name, python): (tree, python)
             for python in pythons for name, tree in checkouts.items()}
    up_port = port()
    direct = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    floors = {served(f, python): (HERE / f, python)
              for python in pythons for f in (FLOORS if args.floors else ())}
    samples: dict[str, list[dict[str, float]]] = {
        name: [] for name in ["direct", *trees, *floors]}
    try:
        with started(pinned(LOAD_CPU, [sys.executable, str(HERE / "upstream.py"),
                                       str(up_port), "0"])):
            wait_ready(direct, 10)
            for round_ in range(args.rounds):
                print(f"round {round_ + 1}: direct", flush=True)
                samples["direct"].append(measure(direct, args.duration))
                for name, (tree, python) in trees.items():
                    samples[name].append(one(gateway(tree, up_port, python), args.duration))
                    print(f"round {round_ + 1}: {name} {samples[name][-1]}", flush=True)
                for name, (script, python) in floors.items():
                    samples[name].append(one(floor(script, up_port, python), args.duration,
                                             streams=False))
                    print(f"round {round_ + 1}: {name} {samples[name][-1]}", flush=True)
            cycled = None
            if args.c1_cycles:
                servers = {**{name: gateway(tree, up_port, python)
                              for name, (tree, python) in trees.items()},
                           **{name: floor(script, up_port, python)
                              for name, (script, python) in floors.items()}}
                cycled = cycles(servers, direct, args.c1_cycles, args.c1_seconds)
    finally:
        for rev in args.revs:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(work / rev)], check=False)
    if args.rounds:
        print(table(samples, args.rounds, args.duration))
    if cycled is not None:
        print(f"\n{cycles_table(cycled, args.c1_cycles, args.c1_seconds)}")


def served(name: str, python: str | None) -> str:
    """A row's name: the tree or floor, and the Python serving it when not this one."""
    return name if python is None else f"{name} on {python}"


@dataclass(frozen=True)
class Served:
    """How to start one gateway or floor in the gateway's place, and where it answers."""

    argv: list[str]
    env: dict[str, str]
    url: str


def gateway(tree: Path, up_port: int, python: str | None) -> Served:
    """``tree``'s ``llmop gateway`` with one route that maps the model name."""
    gw_port = port()
    config = Path(tempfile.mkdtemp(prefix="llmop-tree-")) / "gateway.yaml"
    config.write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": gw_port},
        "routes": [{"models": ["bench"], "upstream": {
            "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
            "apiKey": {"env": "BENCH_KEY"}}}]}))
    url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
    executable, env = interpreter(python, tree / "src")
    return Served([executable, "-m", "llm_operator", "gateway", "--config", str(config),
                   "--log-level", "warning"], {"BENCH_KEY": "sk-bench", **env}, url)


def floor(script: Path, up_port: int, python: str | None) -> Served:
    """A floor (``script PORT UPSTREAM_URL``) in the gateway's place: the same layout."""
    gw_port = port()
    executable, env = interpreter(python, REPO / "src")
    return Served([executable, str(script), str(gw_port),
                   f"http://127.0.0.1:{up_port}/v1/chat/completions"], env,
                  f"http://127.0.0.1:{gw_port}/v1/chat/completions")


def one(server: Served, seconds: int, *, streams: bool = True) -> dict[str, float]:
    """``server`` alone on the proxy's CPU, measured (``streams``: it relays a stream)."""
    with started(pinned(PROXY_CPU, server.argv), server.env) as proc:
        wait_ready(server.url, 60)
        result = measure(server.url, seconds, streams=streams)
        result["rss"] = rss_mb(proc.pid)
    return result


def cycles(servers: dict[str, Served], direct: str, count: int, seconds: int
           ) -> dict[str, dict[str, list[float]]]:
    """Each server's added p50s and p99s at one client: all started at once, measured in turn.

    On the proxy's CPU together, ``count`` cycles of one client for ``seconds`` on each
    (the direct path first, each figure less the direct path's of the same cycle). Idle,
    the others wait in epoll and take no CPU; the host's drift, which moves a whole round
    of separate runs, is spread over every server alike.
    """
    added: dict[str, dict[str, list[float]]] = {
        name: {"p50": [], "p99": []} for name in servers}
    with contextlib.ExitStack() as stack:
        for server in servers.values():
            stack.enter_context(started(pinned(PROXY_CPU, server.argv), server.env))
        for server in servers.values():
            wait_ready(server.url, 60)
            wrk(server.url, 10, 2)  # warm-up
        for cycle in range(count):
            base = wrk(direct, 1, seconds)
            for name, server in servers.items():
                result = wrk(server.url, 1, seconds)
                for key, values in added[name].items():
                    values.append(result[key] - base[key])
            print(f"cycle {cycle + 1}: " + ", ".join(
                f"{name} {values['p50'][-1]:+.3f}/{values['p99'][-1]:+.3f}"
                for name, values in added.items()), flush=True)
    return added


def cycles_table(added: dict[str, dict[str, list[float]]], count: int, seconds: int) -> str:
    lines = [f"One client, every server up at once, {count} cycles of {seconds} s each "
             "in turn: the added p50 and p99 (the server's minus the direct path's in the "
             "same cycle), median [lowest, highest] over the cycles.", "",
             "| server | added p50 ms | added p99 ms |", "|---|---|---|"]

    def spread(values: list[float]) -> str:
        return (f"{statistics.median(values):+.3f} [{min(values):+.3f}, "
                f"{max(values):+.3f}]")

    lines.extend(f"| {name} | {spread(figures['p50'])} | {spread(figures['p99'])} |"
                 for name, figures in added.items())
    return "\n".join(lines)


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
            f"{_added(median(name, 'ttfb'), base['ttfb'])} | {median(name, 'rss'):.0f} | "
            f"{sum(s['errors'] for s in runs):.0f} |")
    return "\n".join(lines)


def _added(value: float, base: float) -> str:
    """``value`` over ``base``; "-" where there is none (a floor relays no stream)."""
    return "-" if math.isnan(value) else f"{value - base:+.2f}"


if __name__ == "__main__":
    main()
