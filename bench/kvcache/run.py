"""Host KV tier benchmark: conversations' later turns with the tier, without it, and unbounded.

More conversations than slots, each with its own long system prompt and a growing history,
sent to llama-server as `llmop up` runs the embedded default (examples/local/gemma3-270m.yaml,
its arguments built by the project's own code). A conversation's next turn comes after the
other conversations have taken every slot: its prompt is either found in the host tier
(``--cache-ram``, from ``spec.kvCache.hostMemory``) or computed again. Four engines, each
started fresh, serve the same workload:

- ``hostMemory: 0``: no tier (the baseline);
- ``hostMemory`` as ``--tier`` says (1Gi by default): the declared tier;
- ``hostMemory`` unset: the default tier, 256Mi, smaller than the workload's prompts;
- no ``--cache-ram`` at all: llama-server's own default (8 GiB, unaccounted), what every
  llama.cpp model got before the tier was declared.

Measured: time to first token (streamed) of turn 1 and of later turns (p50, p90), the share
of later turns' prompt tokens the engine took from its cache (its ``timings.cache_n``), the
engine's largest RSS, sampled every 0.25 s while the workload runs, and the wall time. Then
a workload with no reuse at all (every prompt new): completions per second with the tier
against without it.

    python bench/kvcache/run.py [--conversations 16] [--turns 4] [--slots 4]
        [--system-words 450] [--tier 1Gi]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import importlib.util
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local import llama_build
from llm_operator.local.weights import locate
from llm_operator.profiles.llamaserver import Where, llama_server_args

ROOT = Path(__file__).resolve().parents[2]
# the pool benchmark's process helpers: start, stop, health, RSS of a process tree
_POOL = importlib.util.spec_from_file_location("pool_bench", ROOT / "bench" / "pool" / "run.py")
assert _POOL is not None and _POOL.loader is not None
pool_bench = importlib.util.module_from_spec(_POOL)
_POOL.loader.exec_module(pool_bench)

EXAMPLE = ROOT / "examples" / "local" / "gemma3-270m.yaml"
WORDS = ("river", "stone", "garden", "window", "paper", "signal", "harbor", "lantern",
         "orchard", "meadow", "copper", "thunder", "valley", "market", "engine", "silver",
         "anchor", "canyon", "forest", "mirror", "ladder", "island", "compass", "feather",
         "marble", "candle", "bridge", "planet", "rocket", "summer", "winter", "autumn")
ANSWER_TOKENS = 12


@dataclass
class Run:
    """What one engine did with the workload."""

    first: list[float] = field(default_factory=list)  # turn 1's time to first token
    later: list[float] = field(default_factory=list)  # turns 2 and after
    cached: int = 0  # later turns' prompt tokens taken from the cache
    prompt: int = 0  # later turns' prompt tokens, cached or computed
    rss: int = 0
    seconds: float = 0.0


def system_prompt(conversation: int, words: int) -> str:
    """A long system prompt of its own: the same words in a different order for each."""
    draw = random.Random(conversation)
    return f"System notes for conversation {conversation}: " + " ".join(
        draw.choice(WORDS) for _ in range(words)) + "\n"


async def ask(session: aiohttp.ClientSession, url: str, prompt: str
              ) -> tuple[float, str, int, int]:
    """(time to first token, the answer, cached prompt tokens, all prompt tokens)."""
    body = {"model": "m", "prompt": prompt, "max_tokens": ANSWER_TOKENS, "temperature": 0,
            "stream": True}
    started = time.monotonic()
    ttft: float | None = None
    text: list[str] = []
    cached = computed = 0
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if ttft is None:
                ttft = time.monotonic() - started
            for choice in chunk.get("choices") or ():
                text.append(choice.get("text") or "")
            timings = chunk.get("timings")
            if timings:
                cached, computed = timings.get("cache_n", 0), timings.get("prompt_n", 0)
    if ttft is None:
        raise RuntimeError("no chunk came back")
    return ttft, "".join(text), cached, cached + computed


async def conversations(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                        ) -> Run:
    """Every conversation's turns, a turn of each in turn, ``slots`` requests at once.

    Turn t+1 of any conversation starts once turn t of every conversation is answered:
    by then the other conversations have taken its slot, and a later turn never waits
    behind another conversation's first prompt (what is measured is the cache, not the
    queue).
    """
    run = Run()
    transcripts = [system_prompt(c, args.system_words) for c in range(args.conversations)]

    async def one(conversation: int, turn: int) -> None:
        transcripts[conversation] += (f"User: question {turn} about "
                                      f"{WORDS[(conversation + turn) % len(WORDS)]}?\n"
                                      "Assistant:")
        ttft, answer, cached, prompt = await ask(session, url, transcripts[conversation])
        transcripts[conversation] += answer + "\n"
        if turn == 0:
            run.first.append(ttft)
        else:
            run.later.append(ttft)
            run.cached += cached
            run.prompt += prompt

    began = time.monotonic()
    for turn in range(args.turns):
        queue = list(range(args.conversations))

        async def worker(turn: int = turn, queue: list[int] = queue) -> None:
            while queue:
                await one(queue.pop(0), turn)

        await asyncio.gather(*(worker() for _ in range(args.slots)))
    run.seconds = time.monotonic() - began
    return run


async def fresh_prompts(session: aiohttp.ClientSession, url: str, args: argparse.Namespace
                        ) -> float:
    """Completions per second when no prompt is ever seen again."""
    prompts = [system_prompt(10_000 + i, args.system_words // 3) + "Assistant:"
               for i in range(args.conversations)]
    queue = list(prompts)
    began = time.monotonic()

    async def worker() -> None:
        while queue:
            await ask(session, url, queue.pop())

    await asyncio.gather(*(worker() for _ in range(args.slots)))
    return len(prompts) / (time.monotonic() - began)


async def serve(binary: Path, argv: list[str], work: Path, name: str,
                measure: argparse.Namespace) -> tuple[Run, float]:
    """Start llama-server with ``argv``, run both workloads, sample its RSS meanwhile."""
    port = pool_bench.free_port()
    argv = [*argv]
    argv[argv.index("--port") + 1] = str(port)
    url = f"http://127.0.0.1:{port}"
    proc = pool_bench.start([str(binary), *argv], work / f"{name}.log")
    peak = 0
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, pool_bench.rss_tree(proc.pid))
            await asyncio.sleep(0.25)

    timeout = aiohttp.ClientTimeout(total=None)
    # a connection per request: llama-server closes one after a streamed answer
    connector = aiohttp.TCPConnector(force_close=True)
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            await pool_bench.healthy(session, url, proc, 0.05)
            sampler = asyncio.create_task(sample())
            run = await conversations(session, url, measure)
            rate = await fresh_prompts(session, url, measure)
            sampling = False
            await sampler
    finally:
        pool_bench.stop(proc)
    run.rss = peak
    return run, rate


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def main(args: argparse.Namespace) -> None:
    binary = llama_build.build()
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["llamaCpp"] = {"parallelSlots": args.slots}
    work = Path(tempfile.mkdtemp(prefix="bench-kvcache-"))
    gguf = await locate(parse_llmmodel(doc), ROOT, work)
    where = Where(str(gguf), "127.0.0.1", 0, cores=None)
    configs: dict[str, list[str]] = {}
    for name, tier in (("hostMemory: 0", 0), (f"hostMemory: {args.tier}", args.tier),
                       ("hostMemory unset (256Mi)", None)):
        spec_doc = copy.deepcopy(doc)
        if tier is not None:
            spec_doc["spec"]["kvCache"] = {"hostMemory": tier}
        configs[name] = list(llama_server_args(parse_llmmodel(spec_doc).spec, where).args)
    unbounded = list(configs["hostMemory: 0"])
    at = unbounded.index("--cache-ram")
    del unbounded[at:at + 2]
    configs["llama-server's default (8 GiB)"] = unbounded
    results: dict[str, tuple[Run, float]] = {}
    for number, (name, argv) in enumerate(configs.items()):
        results[name] = await serve(binary, argv, work, f"engine-{number}", args)
        print(f"done: {name}", file=sys.stderr)

    print(f"\n{args.conversations} conversations x {args.turns} turns on {args.slots} slots, "
          f"system prompts of {args.system_words} words, {ANSWER_TOKENS}-token answers; "
          "Gemma 3 270M Q4_K_M, llama-server on the CPU\n")
    print("| engine | turn 1 TTFT p50 | later turns TTFT p50 | p90 | later prompt tokens "
          "from cache | largest RSS | wall | no-reuse completions/s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (run, rate) in results.items():
        share = run.cached / run.prompt if run.prompt else 0.0
        print(f"| {name} | {statistics.median(run.first) * 1000:.0f} ms | "
              f"{statistics.median(run.later) * 1000:.0f} ms | "
              f"{pct(run.later, 0.9) * 1000:.0f} ms | {share:.0%} | "
              f"{run.rss / 2**20:.0f} MiB | {run.seconds:.1f} s | {rate:.2f} |")
    base, tier = results["hostMemory: 0"], results[f"hostMemory: {args.tier}"]
    default = results["llama-server's default (8 GiB)"]
    print(f"\nlater turns' TTFT p90, no tier / declared tier: "
          f"{pct(base[0].later, 0.9) / pct(tier[0].later, 0.9):.1f}x; "
          f"llama-server's default / declared tier: "
          f"{pct(default[0].later, 0.9) / pct(tier[0].later, 0.9):.2f}x")
    print(f"no-reuse completions/s, declared tier / no tier: {tier[1] / base[1]:.2f}x")
    print(f"largest RSS, declared tier - no tier: "
          f"{(tier[0].rss - base[0].rss) / 2**20:.0f} MiB (declared {args.tier}); "
          f"default - no tier: {(default[0].rss - base[0].rss) / 2**20:.0f} MiB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--system-words", type=int, default=450)
    parser.add_argument("--tier", default="1Gi", help="the declared hostMemory")
    asyncio.run(main(parser.parse_args()))
