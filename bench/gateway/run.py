"""Gateway benchmark: direct vs llm-operator's gateway vs the LiteLLM proxy (the baseline).

Run from the repository root with the project's virtualenv (needs `wrk`: apt-get install wrk):

    .venv/bin/python bench/gateway/run.py [--duration 8] [--skip-litellm]

One fake upstream (bench/gateway/upstream.py) and one bounded load generator (wrk, fixed
duration) serve every path in the same run. The proxy under test is pinned to CPU 0, the
upstream and wrk to CPU 1, so each proxy gets one core and the upstream side is identical for
every path. The gateway runs twice: plain, and with client keys and limits and spend in
Redis (Debian's redis-server, on the load CPU). Two bare proxies (the hot path alone, with
aiohttp's server and client, and on Starlette + uvicorn + httpx) show what each off-the-shelf
HTTP stack costs before any gateway feature; the gateway serves with aiohttp's server and
calls upstreams with its own client (llm_operator.gateway.upstream.http1). Prints a Markdown table;
the figures in docs/benchmarks.md come from it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STACKS_VENV = Path(tempfile.gettempdir()) / "llmop-bench-stacks"
LITELLM_VENV = Path(tempfile.gettempdir()) / "llmop-bench-litellm"
CONCURRENCY = (1, 50, 200)
MASTER_KEY = "sk-bench-master-key-0123456789abcdef"  # LiteLLM refuses to start without one
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {MASTER_KEY}"}
PROXY_CPU, LOAD_CPU = "0", "1"
KEYED = "gateway + client keys + Redis limits"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def interpreter(python: str | None, src: Path) -> tuple[str, dict[str, str]]:
    """The Python that serves a proxy, and its environment: ``src`` first on its path.

    ``python``: another interpreter than this virtualenv's (Debian's ``/usr/bin/python3.11``,
    the one the router image ships), given this virtualenv's packages after ``src``; the
    packages' C extensions are built for CPython 3.11's ABI, which every 3.11 shares.
    """
    if python is None:
        return sys.executable, {"PYTHONPATH": str(src)}
    return python, {"PYTHONPATH": os.pathsep.join([str(src), sysconfig.get_paths()["purelib"]])}


def pinned(cpu: str, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv] if shutil.which("taskset") else argv


@dataclass
class Target:
    name: str
    url: str
    process: subprocess.Popen[bytes] | None = None
    results: dict[int, dict[str, float]] = field(default_factory=dict)
    ttfb_ms: float | None = None
    rss_mb: float | None = None


def wait_ready(url: str, timeout: float) -> None:
    body = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "hi"}]})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            req = urllib.request.Request(url, data=body.encode(), headers=HEADERS)
            with urllib.request.urlopen(req, timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer 200 within {timeout}s")


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def wrk(url: str, connections: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        pinned(LOAD_CPU, ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                          "-s", str(HERE / "post.lua"), url]),
        capture_output=True, text=True, check=True).stdout

    def latency(pct: str) -> float:
        match = re.search(rf"^\s+{pct}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        assert match, out
        return float(match.group(1)) * UNITS[match.group(2)]

    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    assert rps, out
    return {"p50": latency("50"), "p99": latency("99"), "rps": float(rps.group(1)),
            "errors": float(errors.group(1)) if errors else 0.0}


async def ttfb(url: str, requests: int = 200) -> float:
    """Median milliseconds to the first byte of a streamed completion, one at a time."""
    body = {"model": "bench", "stream": True,
            "messages": [{"role": "user", "content": "Say hello."}]}
    samples = []
    async with aiohttp.ClientSession(headers={"Authorization": HEADERS["Authorization"]}
                                     ) as session:
        for index in range(requests + 20):
            start = time.perf_counter()
            async with session.post(url, json=body) as resp:
                await resp.content.readany()
                first = time.perf_counter() - start
                await resp.read()
            if index >= 20:  # warm-up excluded
                samples.append(first * 1e3)
    return statistics.median(samples)


def rss_mb(pid: int) -> float:
    """Peak resident memory of a process and its children, in MB."""
    total = 0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(p) for p in children.read_text().split()]
    for p in pids:
        status = Path(f"/proc/{p}/status").read_text()
        match = re.search(r"VmHWM:\s+(\d+) kB", status)
        total += int(match.group(1)) if match else 0
    return total / 1024


def ensure_stacks_venv() -> Path:
    python = STACKS_VENV / "bin" / "python"
    if not (STACKS_VENV / ".complete").exists():
        subprocess.run([sys.executable, "-m", "venv", str(STACKS_VENV)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "starlette", "uvicorn",
                        "httpx"], check=True)
        (STACKS_VENV / ".complete").touch()
    return python


@contextmanager
def started(argv: list[str], env: dict[str, str] | None = None
            ) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(argv, env={**os.environ, **(env or {})},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def measure(target: Target, seconds: int) -> None:
    wrk(target.url, 10, 2)  # warm-up
    for connections in CONCURRENCY:
        target.results[connections] = wrk(target.url, connections, seconds)
        print(f"  {target.name} c={connections}: {target.results[connections]}", flush=True)
    target.ttfb_ms = asyncio.run(ttfb(target.url))
    if target.process is not None:
        target.rss_mb = rss_mb(target.process.pid)


def table(targets: list[Target], baseline: str) -> str:
    direct = targets[0]
    base = next((t for t in targets if t.name == baseline), None)
    lines = [
        "| path | added p50 ms (c=1) | p99 ms (c=1) | req/s c=50 | vs direct | vs LiteLLM "
        "| p50 / p99 ms c=50 | req/s c=200 | p50 / p99 ms c=200 | stream TTFB ms | peak RSS MB "
        "| errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in targets:
        r1, r50, r200 = (t.results[c] for c in CONCURRENCY)
        added = r1["p50"] - direct.results[1]["p50"]
        vs_base = f"{r50['rps'] / base.results[50]['rps']:.1f}x" if base else "-"
        errors = sum(int(r["errors"]) for r in t.results.values())
        lines.append(
            f"| {t.name} | {added:+.2f} | {r1['p99']:.2f} | {r50['rps']:.0f} | "
            f"{r50['rps'] / direct.results[50]['rps']:.2f}x | {vs_base} | "
            f"{r50['p50']:.1f} / {r50['p99']:.1f} | {r200['rps']:.0f} | "
            f"{r200['p50']:.1f} / {r200['p99']:.1f} | "
            f"{t.ttfb_ms:.2f} | {t.rss_mb if t.rss_mb is None else round(t.rss_mb)} | "
            f"{errors} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per wrk run")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--upstream-latency-ms", type=float, nargs="+", default=[0.0, 50.0],
                        help="fixed upstream latency per request; one full run per value")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        sys.exit("wrk is required: apt-get install wrk")
    stacks_python = ensure_stacks_venv()
    litellm_python = None
    if not args.skip_litellm:
        sys.path.insert(0, str(HERE))
        from litellm_env import build  # noqa: PLC0415

        litellm_python = build(LITELLM_VENV)

    for latency in args.upstream_latency_ms:
        print(f"\n## upstream latency {latency:g} ms\n", flush=True)
        report(run_suite(latency, args.duration, stacks_python, litellm_python), latency,
               args.duration)


def report(targets: list[Target], latency: float, seconds: int) -> None:
    print()
    print(f"Upstream latency {latency:g} ms. {os.cpu_count()} CPUs; proxy on CPU {PROXY_CPU}, "
          f"upstream + wrk on CPU {LOAD_CPU}; wrk -t1, {seconds}s per level.")
    print(table(targets, "LiteLLM proxy"))
    plain = next(t for t in targets if t.name == "llm-operator gateway")
    keyed = next((t for t in targets if t.name == KEYED), None)
    if keyed is not None:
        print("\nclient keys + Redis vs the plain gateway: " + ", ".join(
            f"c={c} {keyed.results[c]['rps'] / plain.results[c]['rps']:.2f}x req/s"
            for c in CONCURRENCY))


def run_suite(latency: float, seconds: int, stacks_python: Path,
              litellm_python: Path | None) -> list[Target]:
    up_port = free_port()
    upstream_url = f"http://127.0.0.1:{up_port}/v1/chat/completions"
    workdir = Path(tempfile.mkdtemp(prefix="llmop-bench-"))
    gw_config = workdir / "gateway.yaml"
    gw_port, aio_port, star_port, lite_port, keyed_port, redis_port = (
        free_port() for _ in range(6))
    routes = [{"models": ["bench"], "upstream": {
        "baseUrl": f"http://127.0.0.1:{up_port}/v1", "model": "bench-upstream",
        "apiKey": {"env": "BENCH_KEY"}},
        "rateLimit": {"requestsPerMinute": 100_000_000, "tokensPerMinute": 10_000_000_000},
        "pricing": {"inputPerMillion": 5, "outputPerMillion": 30}}]
    gw_config.write_text(json.dumps({"listen": {"host": "127.0.0.1", "port": gw_port},
                                     "routes": routes}))
    # The same gateway with what a shared deployment turns on: client keys (the wrk key,
    # with its own limits and a budget) and limits and spend in Redis.
    keys_file = workdir / "keys.yaml"
    keys_file.write_text(json.dumps({"keys": [{
        "id": "bench", "sha256": hashlib.sha256(MASTER_KEY.encode()).hexdigest(),
        "requestsPerMinute": 100_000_000, "tokensPerMinute": 10_000_000_000,
        "budget": {"usd": 1_000_000, "period": "month"}}]}))
    keyed_config = workdir / "gateway-keyed.yaml"
    keyed_config.write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": keyed_port}, "routes": routes,
        "clientKeys": {"file": str(keys_file)},
        "redis": {"url": f"redis://127.0.0.1:{redis_port}/0"}}))
    lite_config = workdir / "litellm.yaml"
    lite_config.write_text(json.dumps({"model_list": [{"model_name": "bench", "litellm_params": {
        "model": "openai/bench-upstream", "api_base": f"http://127.0.0.1:{up_port}/v1",
        "api_key": "sk-bench"}}], "litellm_settings": {"telemetry": False}}))

    targets = [Target("direct (no proxy)", upstream_url)]
    redis = shutil.which("redis-server")
    with started(pinned(LOAD_CPU, [sys.executable, str(HERE / "upstream.py"), str(up_port),
                                       str(latency)])), \
            started(pinned(LOAD_CPU, [redis or "true", "--port", str(redis_port), "--bind",
                                      "127.0.0.1", "--save", "", "--appendonly", "no"])):
        wait_ready(upstream_url, 10)
        runs = [
            ("llm-operator gateway", gw_port,
             [str(REPO / ".venv/bin/llmop"), "gateway", "--config", str(gw_config),
              "--log-level", "warning"], {"BENCH_KEY": "sk-bench"}),
            *([(KEYED, keyed_port,
                [str(REPO / ".venv/bin/llmop"), "gateway", "--config", str(keyed_config),
                 "--log-level", "warning"], {"BENCH_KEY": "sk-bench"})] if redis else []),
            ("bare proxy: aiohttp server + client", aio_port,
             [sys.executable, str(HERE / "minimal_aiohttp.py"), str(aio_port), upstream_url], {}),
            ("bare proxy: starlette+uvicorn+httpx", star_port,
             [str(stacks_python), str(HERE / "minimal_starlette.py"), str(star_port),
              upstream_url], {}),
        ]
        if litellm_python is not None:
            runs.append(("LiteLLM proxy", lite_port,
                         [str(litellm_python.parent / "litellm"), "--config", str(lite_config),
                          "--port", str(lite_port), "--host", "127.0.0.1", "--num_workers", "1"],
                         {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
                          "LITELLM_MASTER_KEY": MASTER_KEY}))
        print("measuring direct", flush=True)
        measure(targets[0], seconds)
        for name, port, argv, env in runs:
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            with started(pinned(PROXY_CPU, argv), env) as proc:
                wait_ready(url, 180)
                target = Target(name, url, proc)
                print(f"measuring {name}", flush=True)
                measure(target, seconds)
                targets.append(target)
    return targets


if __name__ == "__main__":
    main()
