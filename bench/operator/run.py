"""Operator benchmark: N LLMModels created in the emulator, the operator in its own process.

For each size it measures the time until every model has its children and an observed
status; write requests per model at creation (baseline: the children rendered per model)
and after a restart with nothing changed (baseline: 0); CPU time per reconcile and the
operator's peak RSS.

    python bench/operator/run.py [--sizes 100,500,1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = yaml.safe_load((ROOT / "config/samples/qwen35-9b-cpu.yaml").read_text())
TEMPLATE["spec"]["modelSource"].pop("huggingFaceTokenSecret")  # no Secret to create
MODELS = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.asynccontextmanager
async def emulator(tmp: Path) -> AsyncIterator[tuple[str, str]]:
    port_file = tmp / "emulator"
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench/operator/emulator.py"),
                             str(port_file)])
    try:
        for _ in range(300):
            if port_file.exists() and port_file.read_text():
                break
            await asyncio.sleep(0.05)
        api, stats = port_file.read_text().split()
        yield api, stats
    finally:
        proc.terminate()
        proc.wait(10)


@contextlib.asynccontextmanager
async def operator(kubeconfig: Path, metrics_port: int, log: Path | None
                   ) -> AsyncIterator[subprocess.Popen[bytes]]:
    llmop = str(Path(sys.executable).parent / "llmop")
    with contextlib.ExitStack() as files:
        stderr = files.enter_context(log.open("ab")) if log else subprocess.DEVNULL
        proc = subprocess.Popen(
            [llmop, "operator", "--all-namespaces", "--resync", "3600", "--metrics-port",
             str(metrics_port), "--log-level", "warning"],
            env={**os.environ, "KUBECONFIG": str(kubeconfig)}, stderr=stderr)
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


async def metric(http: aiohttp.ClientSession, port: int, name: str) -> float:
    try:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    except aiohttp.ClientError:
        return -1.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#"))


async def quiet(http: aiohttp.ClientSession, stats: str, settle: float = 3.0) -> dict[str, int]:
    """The request counts once no write has happened for ``settle`` seconds."""
    last, since = None, time.monotonic()
    while True:
        async with http.get(f"{stats}/__stats") as r:
            counts = await r.json()
        if counts.get("writes") != last:
            last, since = counts.get("writes"), time.monotonic()
        elif time.monotonic() - since >= settle:
            return dict(counts)
        await asyncio.sleep(0.25)


async def converged(http: aiohttp.ClientSession, api: str, count: int) -> bool:
    async with http.get(f"{api}{MODELS}") as r:
        models = (await r.json())["items"]
    observed = sum(1 for m in models if (m.get("status") or {}).get("observedGeneration") == 1)
    async with http.get(f"{api}/apis/apps/v1/namespaces/ai-models/deployments") as r:
        deployments = len((await r.json())["items"])
    return observed == count and deployments == count


async def one_size(count: int, port: int, log_dir: Path | None) -> dict[str, Any]:
    log = log_dir / f"operator-{count}.log" if log_dir else None
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        async with emulator(tmp) as (api, stats), aiohttp.ClientSession() as http:
            kubeconfig = tmp / "kubeconfig"
            kubeconfig.write_text(yaml.safe_dump({
                "apiVersion": "v1", "kind": "Config", "current-context": "e",
                "clusters": [{"name": "e", "cluster": {"server": api}}],
                "users": [{"name": "e", "user": {}}],
                "contexts": [{"name": "e", "context": {"cluster": "e", "user": "e"}}]}))
            async with operator(kubeconfig, port, log) as proc:
                while await metric(http, port, "llmop_operator_reconciles_total") < 0:
                    await asyncio.sleep(0.1)
                await quiet(http, stats, settle=1.0)
                async with http.post(f"{stats}/__stats/reset"):
                    pass
                cpu_before = cpu_seconds(proc.pid)
                start = time.monotonic()
                gate = asyncio.Semaphore(16)

                async def create(i: int) -> None:
                    doc = copy.deepcopy(TEMPLATE)
                    doc["metadata"]["name"] = f"model-{i:04d}"
                    async with gate, http.post(f"{api}{MODELS}", json=doc) as r:
                        assert r.status == 201, await r.text()

                await asyncio.gather(*(create(i) for i in range(count)))
                while not await converged(http, api, count):
                    await asyncio.sleep(0.25)
                converge = time.monotonic() - start
                counts = await quiet(http, stats)
                reconciles = await metric(http, port, "llmop_operator_reconciles_total")
                cpu = cpu_seconds(proc.pid) - cpu_before
                rss = peak_rss_mib(proc.pid)
            async with http.post(f"{stats}/__stats/reset"):
                pass
            async with operator(kubeconfig, port, log) as proc:  # restart, nothing changed
                while await metric(http, port, "llmop_operator_reconciles_total") < count:
                    await asyncio.sleep(0.25)
                restart = await quiet(http, stats)
                rss = max(rss, peak_rss_mib(proc.pid))
    breakdown = {k: round(v / count, 2) for k, v in counts.items()
                 if k not in ("reads", "writes")}
    return {"models": count, "converge_s": converge, "breakdown": breakdown,
            "writes_per_model_create": (counts.get("writes", 0) - count) / count,
            "writes_per_model_restart": restart.get("writes", 0) / count,
            "reconciles": reconciles, "cpu_ms_per_reconcile": cpu / reconciles * 1000,
            "peak_rss_mib": rss}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,500,1000")
    parser.add_argument("--metrics-port", type=int, default=18081)
    parser.add_argument("--log-dir", type=Path, help="keep the operator's warnings here")
    args = parser.parse_args()
    children = len(render(parse_llmmodel({**TEMPLATE, "metadata": {
        "name": "x", "namespace": "ai-models"}}), Settings(), owner_uid="u"))
    rows = [await one_size(int(n), args.metrics_port, args.log_dir)
            for n in args.sizes.split(",")]
    print(f"\nOperator benchmark (emulator and operator in separate processes; "
          f"{os.cpu_count()} CPUs)\n")
    print("| models | converge s | writes/model at create (baseline: "
          f"{children} children) | writes/model after restart (baseline: 0) | reconciles "
          "| CPU ms/reconcile | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['models']} | {r['converge_s']:.1f} | {r['writes_per_model_create']:.2f} "
              f"| {r['writes_per_model_restart']:.2f} | {r['reconciles']:.0f} "
              f"| {r['cpu_ms_per_reconcile']:.1f} | {r['peak_rss_mib']:.0f} |")
    print("\nWrites per model at creation, by request (the benchmark's own POST included):")
    for r in rows:
        print(f"  {r['models']}: {r['breakdown']}")


if __name__ == "__main__":
    asyncio.run(main())
