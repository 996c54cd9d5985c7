"""Conversations over two replicas: routed back to their cache, against spread at random.

Two llama-servers as `llmop up` starts the embedded default, each with a declared host KV
tier, behind `llmop gateway` (the router's own Gateway code, with the route the router
builds for ``routing.strategy``). The workload of bench/kvcache/run.py (more conversations
than slots, each with its own long system prompt and growing history) runs twice, each
time on fresh engines: with ``prefix-cache`` (a turn goes to the replica that was sent its
conversation's beginning) and with ``weighted`` (equal weights, at random: what round
robin does to a conversation). Later turns' time to first token and the share of their
prompt tokens the engines found cached.

    python bench/kvcache/routing.py [--conversations 16] [--turns 4] [--slots 2]
        [--system-words 450] [--tier 1Gi]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local import llama_build
from llm_operator.local.weights import locate
from llm_operator.profiles.llamaserver import Where, llama_server_args

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
LLMOP = str(Path(sys.executable).parent / "llmop")
REPLICAS = 2


sys.path.insert(0, str(HERE.parent))
from script_module import load_script  # noqa: E402

kv: Any = load_script("kvcache_bench", HERE / "run.py")
pool_bench: Any = load_script("pool_bench_helpers", ROOT / "bench" / "pool" / "run.py")


async def one_strategy(binary: Path, argv: list[str], strategy: str, work: Path,
                       args: argparse.Namespace) -> Any:
    """Fresh engines behind a gateway routing with ``strategy``; the workload's Run."""
    ports = [pool_bench.free_port() for _ in range(REPLICAS)]
    engines = []
    for i, port in enumerate(ports):
        own = [*argv]
        own[own.index("--port") + 1] = str(port)
        engines.append(pool_bench.start(
            [str(binary), *own], work / f"{strategy}-engine-{i}.log"))
    gateway_port = pool_bench.free_port()
    config = work / f"gateway-{strategy}.yaml"
    config.write_text(yaml.safe_dump({
        "listen": {"host": "127.0.0.1", "port": gateway_port},
        "routes": [{"name": "bench", "models": ["m"], "streamUpstream": True,
                    "balancing": {"strategy": strategy},
                    "upstreams": [{"name": f"r{i}", "baseUrl": f"http://127.0.0.1:{p}/v1",
                                   "auth": "none", "slots": args.slots}
                                  for i, p in enumerate(ports)]}]}))
    gateway = subprocess.Popen([LLMOP, "gateway", "--config", str(config)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{gateway_port}"
    try:
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=None)) as http:
            for engine, port in zip(engines, ports, strict=True):
                await pool_bench.healthy(http, f"http://127.0.0.1:{port}", engine, 0.05)
            await pool_bench.healthy(http, url, gateway, 0.1)  # its /health answers too
            # every slot of both engines busy: twice as many workers as one engine's slots
            measure = argparse.Namespace(**{**vars(args), "slots": args.slots * REPLICAS})
            return await kv.conversations(http, url, measure)
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)
        for engine in engines:
            pool_bench.stop(engine)


async def main(args: argparse.Namespace) -> None:
    binary = llama_build.build()
    doc = yaml.safe_load((ROOT / "examples" / "local" / "gemma3-270m.yaml").read_text())
    doc["spec"]["llamaCpp"] = {"parallelSlots": args.slots}
    doc["spec"]["kvCache"] = {"hostMemory": args.tier}
    doc["spec"]["resources"]["cpuMillicores"] = 1000  # one thread each: two share 2 cores
    work = Path(tempfile.mkdtemp(prefix="bench-kvcache-routing-"))
    gguf = await locate(parse_llmmodel(copy.deepcopy(doc)), ROOT, work)
    argv = list(llama_server_args(parse_llmmodel(doc).spec,
                                  Where(str(gguf), "127.0.0.1", 0)).args)
    runs: dict[str, Any] = {}
    for strategy in ("weighted", "prefix-cache"):
        runs[strategy] = await one_strategy(binary, argv, strategy, work, args)
        print(f"done: {strategy}", file=sys.stderr)
    pct = kv.pct
    print(f"\n{args.conversations} conversations x {args.turns} turns over {REPLICAS} "
          f"llama-servers of {args.slots} slots and hostMemory {args.tier} each, behind "
          f"`llmop gateway`; system prompts of {args.system_words} words\n")
    print("| routing | later turns TTFT p50 | p90 | later prompt tokens from cache | wall |")
    print("|---|---|---|---|---|")
    for strategy, run in runs.items():
        later = run.later
        share = run.cached / run.prompt if run.prompt else 0.0
        print(f"| {strategy} | {statistics.median(later) * 1000:.0f} ms | "
              f"{pct(later, 0.9) * 1000:.0f} ms | {share:.0%} | "
              f"{run.seconds:.1f} s |")
    spread, routed = runs["weighted"], runs["prefix-cache"]
    print(f"\nlater turns' TTFT p90, weighted / prefix-cache: "
          f"{pct(spread.later, 0.9) / pct(routed.later, 0.9):.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=16)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--system-words", type=int, default=450)
    parser.add_argument("--tier", default="1Gi", help="each engine's hostMemory")
    asyncio.run(main(parser.parse_args()))
