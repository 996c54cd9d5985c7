"""Local serving benchmark: `llmop up`'s gateway against llama-server started by hand.

Runs the real stack (`llmop up examples/local --detach`) and, beside it, a raw llama-server
with exactly the arguments `llmop up` gave its own (read from the model's log: same file,
slots, context, threads). Then, for 1, 4 and 8 concurrent requests, plain and streamed,
it sends the same completions (fixed prompt, ``--max-tokens`` generated tokens each, EOS
ignored) through the gateway and straight to the raw server, rounds alternating so that
drift hits both alike, and compares medians:

- aggregate tokens/s (all requests' tokens over the round's wall time);
- the slowest request of a round;
- time to the first streamed token (median of every request).

With ``--previous-engine`` (needs llama-cpp-python installed), the hand-kept engine that
`llmop up` ran before llama-server (from git history, commit f5b5c5a) joins as a third path.

    python bench/local/run.py [--rounds 3] [--max-tokens 128] [--previous-engine]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "local"
MODEL_ID = "gemma-3-270m"
PREVIOUS = "f5b5c5a"  # the last commit with llm_operator/local/engine.py


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Round:
    """One burst of concurrent requests on one path."""

    tokens: int = 0
    wall: float = 0.0
    slowest: float = 0.0
    first_tokens: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.tokens / self.wall if self.wall else 0.0


async def one(http: aiohttp.ClientSession, url: str, max_tokens: int, stream: bool,
              index: int) -> tuple[int, float, float | None]:
    """(completion tokens, seconds, seconds to the first token) of one request."""
    body = {"model": MODEL_ID, "prompt": f"Story number {index}. Once upon a time",
            "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    started = time.perf_counter()
    first = None
    tokens = 0
    async with http.post(f"{url}/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status} {await resp.text()}")
        if not stream:
            tokens = (await resp.json())["usage"]["completion_tokens"]
        else:
            async for line in resp.content:
                if not line.startswith(b"data: {"):
                    continue
                event = json.loads(line[6:])
                if first is None and event.get("choices") and event["choices"][0].get("text"):
                    first = time.perf_counter() - started
                if event.get("usage"):
                    tokens = event["usage"]["completion_tokens"]
    return tokens, time.perf_counter() - started, first


async def burst(url: str, clients: int, max_tokens: int, stream: bool) -> Round:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        started = time.perf_counter()
        results = await asyncio.gather(*(one(http, url, max_tokens, stream, i)
                                         for i in range(clients)))
        wall = time.perf_counter() - started
    return Round(tokens=sum(r[0] for r in results), wall=wall,
                 slowest=max(r[1] for r in results),
                 first_tokens=[r[2] for r in results if r[2] is not None])


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    import urllib.request  # noqa: PLC0415

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"{url} is not healthy after 120 s")


def llmop_argv(state: Path) -> list[str]:
    """llama-server's command line in `llmop up`'s log for the example model."""
    log = (state / "logs" / "gemma3-270m.log").read_text()
    line = next(ln for ln in log.splitlines() if " start: " in ln)
    return shlex.split(line.split(" start: ", 1)[1])


def with_port(argv: list[str], port: int) -> list[str]:
    out = list(argv)
    out[out.index("--port") + 1] = str(port)
    return out


def previous_engine(argv: list[str], port: int, work: Path) -> list[str]:
    """The engine `llmop up` ran before llama-server, with the same file, context, threads."""
    source = subprocess.run(["git", "-C", str(ROOT), "show",
                             f"{PREVIOUS}:src/llm_operator/local/engine.py"],
                            check=True, capture_output=True, text=True).stdout
    script = work / "previous_engine.py"
    script.write_text(source)
    flag = {a: argv[i + 1] for i, a in enumerate(argv[:-1]) if a.startswith("--")}
    slots = int(flag["--parallel"])
    return [sys.executable, str(script), "--model", flag["--model"], "--model_alias", MODEL_ID,
            "--port", str(port), "--n_ctx", str(int(flag["--ctx-size"]) // slots),
            "--n_threads", flag["--threads"], "--chat_format", "gemma", "--max_queue", "64"]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


async def measure(paths: dict[str, str], rounds: int, max_tokens: int,
                  levels: list[int], modes: list[bool]
                  ) -> dict[tuple[str, int, bool], list[Round]]:
    results: dict[tuple[str, int, bool], list[Round]] = {}
    for name, url in paths.items():  # warm each path (prompt cache, connections)
        await burst(url, 2, 8, stream=True)
        print(f"warmed {name}", file=sys.stderr)
    for stream in modes:
        for clients in levels:
            for r in range(rounds):
                order = list(paths.items()) if r % 2 == 0 else list(reversed(paths.items()))
                for name, url in order:
                    results.setdefault((name, clients, stream), []).append(
                        await burst(url, clients, max_tokens, stream))
            print(f"done: {clients} concurrent, {'streamed' if stream else 'plain'}",
                  file=sys.stderr)
    return results


def report(results: dict[tuple[str, int, bool], list[Round]], paths: list[str],
           levels: list[int], modes: list[bool]) -> None:
    base = "raw llama-server"
    print("| requests at a time | mode | path | aggregate tok/s | vs raw | slowest request | "
          "vs raw | first token (median) |")
    print("|---|---|---|---|---|---|---|---|")
    for stream in modes:
        for clients in levels:
            raw = results[(base, clients, stream)]
            raw_rate = median([r.rate for r in raw])
            raw_slow = median([r.slowest for r in raw])
            for name in paths:
                rounds = results[(name, clients, stream)]
                rate = median([r.rate for r in rounds])
                slow = median([r.slowest for r in rounds])
                ttft = median([t for r in rounds for t in r.first_tokens])
                first = f"{ttft * 1000:.1f} ms" if stream else "-"
                print(f"| {clients} | {'stream' if stream else 'plain'} | {name} | "
                      f"{rate:.1f} | {rate / raw_rate:.2f}x | {slow:.2f} s | "
                      f"{slow / raw_slow:.2f}x | {first} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--previous-engine", action="store_true")
    parser.add_argument("--levels", default="1,4,8", help="requests at a time, comma-separated")
    parser.add_argument("--modes", default="plain,stream", help="plain, stream or both")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-local-"))
    state = work / "state"
    port = free_port()
    procs: list[subprocess.Popen[bytes]] = []
    up = subprocess.run([sys.executable, "-m", "llm_operator", "up", str(EXAMPLES), "--detach",
                         "--port", str(port), "--mcp-port", "0", "--state-dir", str(state)],
                        capture_output=True, text=True, check=False,
                        env={k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")})
    if up.returncode != 0:
        raise SystemExit(up.stdout + up.stderr)
    try:
        argv = llmop_argv(state)
        print("llama-server " + shlex.join(argv[1:]), file=sys.stderr)
        raw_port = free_port()
        with (work / "raw.log").open("wb") as log:
            procs.append(subprocess.Popen(with_port(argv, raw_port), stdout=log,
                                          stderr=subprocess.STDOUT))
        paths = {"llmop up gateway": f"http://127.0.0.1:{port}/v1",
                 "raw llama-server": f"http://127.0.0.1:{raw_port}/v1"}
        wait_healthy(f"http://127.0.0.1:{raw_port}", procs[-1])
        if args.previous_engine:
            old_port = free_port()
            with (work / "previous.log").open("wb") as log:
                procs.append(subprocess.Popen(previous_engine(argv, old_port, work),
                                              stdout=log, stderr=subprocess.STDOUT))
            wait_healthy(f"http://127.0.0.1:{old_port}", procs[-1])
            paths["previous engine (direct)"] = f"http://127.0.0.1:{old_port}/v1"
        levels = [int(n) for n in args.levels.split(",")]
        modes = [m == "stream" for m in args.modes.split(",")]
        results = asyncio.run(measure(paths, args.rounds, args.max_tokens, levels, modes))
        print(f"\nGemma 3 270M Q4_K_M, {args.max_tokens} tokens per request, "
              f"{os.cpu_count()} cores, medians of {args.rounds} rounds; baseline: raw "
              "llama-server with `llmop up`'s own arguments\n")
        report(results, list(paths), levels, modes)
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run([sys.executable, "-m", "llm_operator", "down", "--state-dir",
                        str(state)], capture_output=True, check=False)


if __name__ == "__main__":
    main()
