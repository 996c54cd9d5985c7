"""Local runtime benchmark: tokens per second through `llmop up`, and time to first token.

Runs the real stack (`llmop up examples/local`, its own processes) and measures, on the
same Gemma 3 270M file with the same settings:

- generation speed: completion tokens per second of one chat completion (temperature 0,
  fixed prompt, --max-tokens), through the gateway and straight to the model's engine
  process (llm_operator.local.engine; each plain and streamed), and with llama-cpp-python
  in this process (the baseline: no HTTP at all). Rounds alternate between the paths so
  drift hits each alike; medians are compared;
- time to first token from launching `llmop up` (virtualenv ready): process start, model
  file located (assembled on the cold run), llama.cpp loaded, first streamed token at the
  gateway — against the floor of a fresh Python process that loads llama-cpp-python and
  the model and generates one token.

    python bench/local/run.py [--rounds 15] [--max-tokens 64] [--starts 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "local"
MODEL_ID = "gemma-3-270m"
PROMPT = [{"role": "user", "content": "Write a short story about a lighthouse keeper."}]
SETTINGS = {"n_ctx": 4096, "n_threads": 2, "chat_format": "gemma"}  # as examples/local


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def llmop(*args: str) -> list[str]:
    return [sys.executable, "-m", "llm_operator", *args]


def body(max_tokens: int, stream: bool = False) -> dict[str, Any]:
    return {"model": MODEL_ID, "messages": PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "stream": stream, **({"stream_options": {"include_usage": True}} if stream else {})}


async def via_http(http: aiohttp.ClientSession, base: str, max_tokens: int) -> float:
    started = time.perf_counter()
    async with http.post(f"{base}/chat/completions", json=body(max_tokens)) as resp:
        data = await resp.json()
        assert resp.status == 200, data
    return int(data["usage"]["completion_tokens"]) / (time.perf_counter() - started)


async def via_stream(http: aiohttp.ClientSession, base: str, max_tokens: int) -> float:
    started = time.perf_counter()
    tokens = 0
    async with http.post(f"{base}/chat/completions", json=body(max_tokens, True)) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: {"):
                event = json.loads(line[6:])
                if event.get("choices") and event["choices"][0]["delta"].get("content"):
                    tokens += 1  # llama-cpp-python streams one token per event
    return tokens / (time.perf_counter() - started)


def in_process(llm: Any, max_tokens: int) -> float:
    started = time.perf_counter()
    out = llm.create_chat_completion(PROMPT, max_tokens=max_tokens, temperature=0)
    return int(out["usage"]["completion_tokens"]) / (time.perf_counter() - started)


def wait_state(state: Path, timeout: float = 300) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            snap = json.loads((state / "up.json").read_text())
        except (OSError, ValueError):
            snap = None
        if snap and snap.get("settled"):
            return dict(snap)
        time.sleep(0.1)
    raise TimeoutError("llmop up did not settle")


async def speed(args: argparse.Namespace, cache: Path, work: Path) -> dict[str, list[float]]:
    from llama_cpp import Llama  # noqa: PLC0415 - the baseline, only here

    state = work / "state-speed"
    subprocess.run(llmop("up", str(EXAMPLES), "--detach", "--port", str(free_port()),
                         "--mcp-port", str(free_port()), "--state-dir", str(state),
                         "--cache-dir", str(cache)), check=True, capture_output=True)
    try:
        snap = wait_state(state)
        gateway = snap["gateway"]
        port = next(r["where"] for r in snap["models"] if r["name"] == "gemma3-270m")
        server = f"http://127.0.0.1:{port.rsplit(':', 1)[1]}/v1"
        gguf = next(cache.rglob("*.gguf"))
        llm = Llama(str(gguf), verbose=False, **SETTINGS)
        results: dict[str, list[float]] = {"in-process": [], "server": [], "gateway": [],
                                           "server-stream": [], "gateway-stream": []}
        async with aiohttp.ClientSession() as http:
            await via_http(http, gateway, 8)  # warm both paths
            # In a thread, so the event loop keeps seeing the servers close idle connections.
            await asyncio.to_thread(in_process, llm, 8)
            paths: dict[str, Callable[[], Awaitable[float]]] = {
                "in-process": lambda: asyncio.to_thread(in_process, llm, args.max_tokens),
                "server": lambda: via_http(http, server, args.max_tokens),
                "gateway": lambda: via_http(http, gateway, args.max_tokens),
                "server-stream": lambda: via_stream(http, server, args.max_tokens),
                "gateway-stream": lambda: via_stream(http, gateway, args.max_tokens),
            }
            for _ in range(args.rounds):
                for name, measure in paths.items():
                    # llama.cpp's threads spin for a while after a generation: let the
                    # previous path's process go idle so it does not slow the next one.
                    await asyncio.sleep(args.gap)
                    results[name].append(await measure())
        return results
    finally:
        subprocess.run(llmop("down", "--state-dir", str(state)), check=False,
                       capture_output=True)


async def first_token(gateway: str, deadline: float) -> None:
    """Stream through the gateway until the first content chunk (retrying until it serves)."""
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.post(f"{gateway}/chat/completions", json=body(8, True)) as resp:
                    if resp.status == 200:
                        async for line in resp.content:
                            if b'"content"' in line:
                                return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise TimeoutError("no first token")


def startup(cache: Path, work: Path, index: int) -> float:
    port = free_port()
    state = work / f"state-start-{index}"
    started = time.monotonic()
    proc = subprocess.Popen(llmop("up", str(EXAMPLES), "--port", str(port), "--mcp-port",
                                  str(free_port()), "--state-dir", str(state), "--cache-dir",
                                  str(cache)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        asyncio.run(first_token(f"http://127.0.0.1:{port}/v1", started + 300))
        return time.monotonic() - started
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(30)


def floor(cache: Path) -> float:
    gguf = next(cache.rglob("*.gguf"))
    code = ("from llama_cpp import Llama; import json, sys; "
            f"llm = Llama({str(gguf)!r}, verbose=False, **json.loads(sys.argv[1])); "
            f"next(iter(llm.create_chat_completion({PROMPT!r}, max_tokens=1, stream=True)))")
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code, json.dumps(SETTINGS)], check=True,
                   capture_output=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--gap", type=float, default=1.0,
                        help="Idle seconds before each measurement.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="llmop-bench-"))
    cache = work / "cache"
    try:
        cold = startup(cache, work, 0)  # assembles the model file into the empty cache
        warm = [startup(cache, work, i + 1) for i in range(args.starts)]
        floors = [floor(cache) for _ in range(args.starts)]
        results = asyncio.run(speed(args, cache, work))
    except BaseException:
        print(f"failed; logs kept in {work}", file=sys.stderr)
        raise
    shutil.rmtree(work, ignore_errors=True)
    base = statistics.median(results["in-process"])
    print(f"\nGeneration speed, {args.max_tokens} tokens, {args.rounds} alternating rounds "
          f"(medians; baseline: llama-cpp-python in-process)")
    print(f"{'path':<34}{'tokens/s':>10}{'vs baseline':>13}{'p25-p75':>14}")
    for name, label in (("in-process", "llama-cpp-python in-process"),
                        ("server", "engine process, direct HTTP"),
                        ("gateway", "llmop up gateway"),
                        ("server-stream", "engine process, streamed"),
                        ("gateway-stream", "llmop up gateway, streamed")):
        median = statistics.median(results[name])
        q1, _, q3 = statistics.quantiles(results[name], n=4)
        print(f"{label:<34}{median:>10.1f}{median / base:>12.3f}x{q1:>8.1f}-{q3:<5.1f}")
    print(f"\nTime to first token from launching `llmop up` (baseline: fresh process loading "
          f"llama-cpp-python + model, 1 token; median of {args.starts})")
    print(f"{'case':<34}{'seconds':>10}{'vs baseline':>13}")
    floor_median = statistics.median(floors)
    print(f"{'baseline (load + 1 token)':<34}{floor_median:>10.2f}{1:>12.2f}x")
    print(f"{'llmop up, model file cached':<34}{statistics.median(warm):>10.2f}"
          f"{statistics.median(warm) / floor_median:>12.2f}x")
    print(f"{'llmop up, cold (file assembled)':<34}{cold:>10.2f}{cold / floor_median:>12.2f}x")
    print(f"\nmachine: {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
