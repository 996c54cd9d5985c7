"""MCP server benchmark: tools/list latency, list_changed propagation, tool-call overhead.

Starts `llmop mcp` (its own process) over N generated LLMModel files served by the benchmark
upstream (bench/gateway/upstream.py), then measures (needs `wrk`: apt install wrk):

- tools/list with 10, 100 and 1,000 models: the first page (100 tools) timed by wrk on one
  connection (server cost alone), against GET /health (the HTTP floor) and a plain `ping`
  (the MCP floor); and every page through the official client, both eras;
- list_changed propagation: admin-API push -> notification at a 2026-07-28 listen stream and
  at a 2025-11-25 GET stream; and a YAML file written -> notification (adds the poll);
- tool-call overhead: tools/call through the server vs POSTing the same chat completion to
  the upstream directly;
- 200 concurrent tools/list at the largest size (wrk, 200 connections): plain JSON-RPC,
  2026-07-28, and 2025-11-25 across 200 sessions; p50/p99 and req/s against the baseline of
  the same server with `--sdk-baseline` (the SDK shaping every listing, SSE session answers).

    python bench/mcp/run.py [--sizes 10,100,1000] [--repeat 50] [--concurrency 200]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import mcp_types as types
import yaml

from mcp import Client

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "config/samples/qwen35-9b-cpu.yaml").read_text())
TOKEN = "bench-token"
MESSAGES = [{"role": "user", "content": "hi"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_models(directory: Path, count: int, endpoint: str) -> Path:
    statuses = {}
    for i in range(count):
        doc = copy.deepcopy(TEMPLATE)
        doc["metadata"]["name"] = f"model-{i:04d}"
        doc["spec"]["mcpExposure"]["toolName"] = f"model_{i:04d}"
        (directory / f"model-{i:04d}.yaml").write_text(yaml.safe_dump(doc))
        statuses[doc["metadata"]["name"]] = {"phase": "Ready", "endpoint": endpoint}
    status_file = directory.parent / "status.yaml"
    status_file.write_text(yaml.safe_dump(statuses))
    return status_file


@contextlib.asynccontextmanager
async def process(args: list[str], ready_url: str | None = None) -> AsyncIterator[None]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if ready_url:
            async with aiohttp.ClientSession() as http:
                for _ in range(600):
                    with contextlib.suppress(aiohttp.ClientError):
                        async with http.get(ready_url) as r:
                            if r.status == 200:
                                break
                    await asyncio.sleep(0.1)
                else:
                    raise RuntimeError(f"{args} never became ready")
        yield
    finally:
        proc.terminate()
        proc.wait(10)


async def timed(fn: Callable[[], Awaitable[Any]], repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls after two warm-ups."""
    for _ in range(2):
        await fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        await fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {}}
WRK_REQUESTS: list[tuple[str, str, dict[str, str], dict[str, Any] | None]] = [
    ("GET /health (HTTP floor)", "GET", {}, None),
    ("ping, plain JSON-RPC (MCP floor)", "POST", {},
     {"jsonrpc": "2.0", "id": 1, "method": "ping"}),
    ("tools/list first page, plain JSON-RPC", "POST", {},
     {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}),
    ("tools/list first page, 2026-07-28", "POST",
     {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
     {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": META}}),
]


def wrk_script(method: str, headers: dict[str, str], body: Any) -> str:
    lines = [f'wrk.method = "{method}"', 'wrk.headers["Content-Type"] = "application/json"',
             'wrk.headers["Accept"] = "*/*"']  # as curl sends
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    if body is not None:
        lines.append(f"wrk.body = [[{json.dumps(body)}]]")
    return "\n".join(lines) + "\n"


def _ms(match: re.Match[str]) -> float:
    return float(match.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[match.group(2)]


def wrk_stats(url: str, script: str, seconds: int, connections: int) -> dict[str, float]:
    """p50 and p99 in ms and requests per second from wrk; errors raise."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency",
                              "-s", file.name, url], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(file.name)
    if "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk saw errors:\n{out}")
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)\b", out)
    p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)\b", out)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert p50 and p99 and rps, out
    return {"p50": _ms(p50), "p99": _ms(p99), "rps": float(rps.group(1))}


def wrk_median(url: str, method: str, headers: dict[str, str], body: Any,
               seconds: int) -> float:
    """Median latency in ms from wrk, one connection (server cost without Python clients)."""
    return wrk_stats(url, wrk_script(method, headers, body), seconds, 1)["p50"]


LISTING = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


async def open_sessions(url: str, count: int) -> list[str]:
    """``count`` initialized 2025-11-25 sessions."""
    accept = {"Accept": "application/json, text/event-stream"}
    sessions = []
    async with aiohttp.ClientSession() as http:
        for _ in range(count):
            async with http.post(url, headers=accept, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "bench", "version": "1"}}}) as r:
                assert r.status == 200, await r.text()
                sid = r.headers["mcp-session-id"]
            async with http.post(url, json={"jsonrpc": "2.0",
                                            "method": "notifications/initialized"},
                                 headers={**accept, "Mcp-Session-Id": sid,
                                          "MCP-Protocol-Version": "2025-11-25"}) as r:
                assert r.status == 202, await r.text()
            sessions.append(sid)
    return sessions


def rotating_sessions_script(sessions: list[str]) -> str:
    """A wrk Lua script sending each request in the next session (all at once with -c N)."""
    ids = ", ".join(f'"{s}"' for s in sessions)
    body = json.dumps({**LISTING, "id": 2})
    return f"""local sids = {{{ids}}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("POST", nil, {{["Content-Type"] = "application/json",
    ["Accept"] = "application/json, text/event-stream", ["Mcp-Session-Id"] = sids[i % #sids + 1],
    ["MCP-Protocol-Version"] = "2025-11-25"}}, [[{body}]])
end
"""


async def concurrent_listing(base: str, seconds: int, connections: int
                             ) -> dict[str, dict[str, float]]:
    url = f"{base}/mcp"
    scripts = {
        "plain JSON-RPC": wrk_script("POST", {}, LISTING),
        "2026-07-28": wrk_script("POST", {"MCP-Protocol-Version": "2026-07-28",
                                          "Mcp-Method": "tools/list"},
                                 {**LISTING, "params": {"_meta": META}}),
        f"2025-11-25, {connections} sessions": rotating_sessions_script(
            await open_sessions(url, connections)),
    }
    return {name: await asyncio.to_thread(wrk_stats, url, script, seconds, connections)
            for name, script in scripts.items()}


async def list_latency(base: str, repeat: int, seconds: int) -> dict[str, float]:
    out = {}
    for name, method, headers, body in WRK_REQUESTS:
        url = f"{base}/health" if method == "GET" else f"{base}/mcp"
        out[f"{name} [wrk]"] = await asyncio.to_thread(wrk_median, url, method, headers,
                                                       body, seconds)
    for era in ("auto", "legacy"):
        async with Client(f"{base}/mcp", mode=era) as client:
            label = "2026-07-28" if era == "auto" else "2025-11-25"

            async def every_page(c: Client = client) -> None:
                cursor = None
                while True:
                    page = await c.list_tools(cursor=cursor)
                    cursor = page.next_cursor
                    if cursor is None:
                        return

            out[f"tools/list every page, official client {label}"] = await timed(
                every_page, repeat)
    return out


async def propagation(url: str, models: Path, base: str, rounds: int) -> dict[str, float]:
    legacy_seen: asyncio.Queue[float] = asyncio.Queue()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            legacy_seen.put_nowait(time.perf_counter())

    results: dict[str, list[float]] = {"admin push -> 2026-07-28 listen stream": [],
                                       "admin push -> 2025-11-25 GET stream": [],
                                       "file written -> 2026-07-28 listen stream": []}
    async with Client(url, mode="legacy", message_handler=on_message) as legacy, \
            Client(url) as modern, modern.listen(tools_list_changed=True) as sub, \
            aiohttp.ClientSession() as http:
        await legacy.send_ping()
        await asyncio.sleep(0.5)  # let the legacy client open its GET stream
        events = aiter(sub)
        for i in range(rounds):
            start = time.perf_counter()
            async with http.put(f"{base}/admin/tools/pushed_{i}", json={
                    "name": f"pushed_{i}", "endpoint": "http://127.0.0.1:9/v1",
                    "modelId": "m", "domains": []},
                    headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200, await r.text()
            await anext(events)
            results["admin push -> 2026-07-28 listen stream"].append(
                (time.perf_counter() - start) * 1000)
            seen = await asyncio.wait_for(legacy_seen.get(), 5)
            results["admin push -> 2025-11-25 GET stream"].append((seen - start) * 1000)
        for i in range(rounds):
            doc = copy.deepcopy(TEMPLATE)
            doc["metadata"]["name"] = f"new-{i}"
            doc["spec"]["mcpExposure"]["toolName"] = f"new_{i}"
            doc["status"] = {"phase": "Ready", "endpoint": "http://127.0.0.1:9/v1"}
            start = time.perf_counter()
            (models / f"new-{i}.yaml").write_text(yaml.safe_dump(doc))
            await anext(events)
            results["file written -> 2026-07-28 listen stream"].append(
                (time.perf_counter() - start) * 1000)
            with contextlib.suppress(asyncio.QueueEmpty):
                while True:
                    legacy_seen.get_nowait()
    return {k: statistics.median(v) for k, v in results.items()}


async def call_overhead(url: str, upstream: str, repeat: int) -> dict[str, float]:
    out = {}
    async with aiohttp.ClientSession() as http:
        async def direct() -> None:
            async with http.post(f"{upstream}/chat/completions", json={
                    "model": "Qwen/Qwen3.5-9B-GGUF", "messages": MESSAGES}) as r:
                await r.read()
        out["POST upstream directly (baseline)"] = await timed(direct, repeat)
    for era in ("auto", "legacy"):
        async with Client(url, mode=era) as client:
            label = "2026-07-28" if era == "auto" else "2025-11-25"

            async def call(c: Client = client) -> None:
                result = await c.call_tool("model_0000", {"messages": MESSAGES})
                assert not result.is_error, result

            out[f"tools/call, {label}"] = await timed(call, repeat)
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seconds", type=int, default=5, help="wrk duration per request")
    parser.add_argument("--concurrency", type=int, default=200,
                        help="connections for the concurrent tools/list table")
    args = parser.parse_args()
    llmop = str(Path(sys.executable).parent / "llmop")
    up_port = free_port()
    upstream = f"http://127.0.0.1:{up_port}/v1"
    rows: list[tuple[str, str, float]] = []
    concurrent: dict[str, dict[str, dict[str, float]]] = {}
    async with process([sys.executable, str(ROOT / "bench/gateway/upstream.py"), str(up_port)]):
        for size in [int(s) for s in args.sizes.split(",")]:
            with tempfile.TemporaryDirectory() as tmp:
                models = Path(tmp) / "models"
                models.mkdir()
                status_file = write_models(models, size, upstream)
                token = Path(tmp) / "token"
                token.write_text(TOKEN)
                port = free_port()
                base = f"http://127.0.0.1:{port}"
                cmd = [llmop, "mcp", "-f", str(models), "--status-file", str(status_file),
                       "--port", str(port), "--log-level", "warning",
                       "--admin-token-file", str(token),
                       "--sessions-per-client", str(args.concurrency + 10)]
                largest = size == max(int(s) for s in args.sizes.split(","))
                start = time.perf_counter()
                async with process(cmd, f"{base}/ready"):
                    rows.append((f"{size} models", "startup to ready (process)",
                                 (time.perf_counter() - start) * 1000))
                    for name, ms in (await list_latency(base, args.repeat,
                                                        args.seconds)).items():
                        rows.append((f"{size} models", name, ms))
                    if largest:
                        concurrent["ours"] = await concurrent_listing(
                            base, args.seconds, args.concurrency)
                        for name, ms in (await propagation(f"{base}/mcp", models, base,
                                                           args.rounds)).items():
                            rows.append((f"{size} models", name, ms))
                        for name, ms in (await call_overhead(f"{base}/mcp", upstream,
                                                             args.repeat)).items():
                            rows.append((f"{size} models", name, ms))
                if largest:
                    port = free_port()
                    base = f"http://127.0.0.1:{port}"
                    baseline = [*cmd, "--sdk-baseline"]
                    baseline[baseline.index("--port") + 1] = str(port)
                    async with process(baseline, f"{base}/ready"):
                        concurrent["baseline"] = await concurrent_listing(
                            base, args.seconds, args.concurrency)
    print(f"\nMCP server benchmark (medians; python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs)\n")
    print(f"| {'registry':<12} | {'measurement':<50} | {'median ms':>9} |")
    print(f"|{'-' * 14}|{'-' * 52}|{'-' * 11}|")
    for group, name, ms in rows:
        print(f"| {group:<12} | {name:<50} | {ms:>9.2f} |")
    if concurrent:
        print(f"\n{args.concurrency} concurrent tools/list (first page) at "
              f"{max(int(s) for s in args.sizes.split(','))} models, wrk {args.seconds} s; "
              "baseline: --sdk-baseline\n")
        print("| path | p50 ms | p99 ms | req/s | baseline p50 | baseline p99 | baseline "
              "req/s | p99 ratio |")
        print("|---|---|---|---|---|---|---|---|")
        for name, ours in concurrent["ours"].items():
            base_ = concurrent["baseline"][name]
            print(f"| {name} | {ours['p50']:.0f} | {ours['p99']:.0f} | {ours['rps']:.0f} | "
                  f"{base_['p50']:.0f} | {base_['p99']:.0f} | {base_['rps']:.0f} | "
                  f"{base_['p99'] / ours['p99']:.1f}x |")


if __name__ == "__main__":
    asyncio.run(main())
