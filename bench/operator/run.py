"""Operator benchmark on a real kube-apiserver: N LLMModels, this tree against a baseline.

Each run gets a fresh control plane (etcd, kube-apiserver, kube-controller-manager from
../shared/k8s) with the KEDA and Prometheus-Operator CRDs, and the operator in its own
process under its own user, so the API server's audit log counts exactly its requests.
The baseline is the kopf-based operator of an earlier commit (default a9a349f, the last
one before the watch caches), run from a git worktree in the same venv (needs kopf).

Measured per size and operator: time until every model has its children and an observed
status; writes per model at creation; reads per reconcile in the steady state (resyncs,
nothing changing) and writes then (baseline: 0); writes after a restart with nothing
changed (baseline: 0); operator CPU per reconcile and peak RSS.

    python bench/operator/run.py [--sizes 100,1000] [--baseline REV | --no-baseline]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import importlib.util
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from llm_operator.kube import Kube, from_kubeconfig  # noqa: E402

from controlplane import (  # noqa: E402
    OPERATOR_TOKEN,
    OPERATOR_USER,
    ControlPlane,
    control_plane,
)

TEMPLATE = yaml.safe_load((ROOT / "config/samples/qwen35-9b-cpu.yaml").read_text())
TEMPLATE["spec"]["modelSource"].pop("huggingFaceTokenSecret")  # no Secret to create
NS = "bench"
API = "ai.example.io/v1alpha1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
SCHEMAS = Path(os.environ.get("LLMOP_SCHEMAS", ROOT.parent / "shared" / "schemas" / "crds"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime + stime


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def baseline_tree(rev: str) -> Iterator[Path]:
    """The baseline's source tree, checked out in a temporary git worktree."""
    path = Path(tempfile.mkdtemp(prefix="llmop-baseline-")) / "tree"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path),
                    rev], check=True)
    try:
        yield path / "src"
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)],
                       check=False)


@contextlib.asynccontextmanager
async def operator(plane: ControlPlane, src: Path | None, port: int, resync: float,
                   log: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    """`llmop operator -n bench` as the bench-operator user, from ``src`` (None: this tree)."""
    kubeconfig = plane.root / "operator-kubeconfig"
    plane.write_kubeconfig(kubeconfig, OPERATOR_TOKEN, OPERATOR_USER)
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "llm_operator", "operator", "-n", NS, "--resync", str(resync),
             "--metrics-port", str(port), "--log-level", "warning"], env=env, stderr=out)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def reconciles(http: aiohttp.ClientSession, port: int) -> float:
    """llmop_operator_reconciles_total (all results); -1 while the endpoint is not up."""
    try:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
            text = await r.text()
    except aiohttp.ClientError:
        return -1.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("llmop_operator_reconciles_total"))


def operator_requests(plane: ControlPlane, since: int) -> Any:
    return plane.count([e for e in plane.requests(since=since, user=OPERATOR_USER)
                        if e.get("verb") != "watch"])


async def quiet(plane: ControlPlane, since: int, settle: float = 3.0) -> None:
    """Until the operator has written nothing for ``settle`` seconds."""
    last, at = -1, time.monotonic()
    while time.monotonic() - at < settle:
        writes = operator_requests(plane, since)["writes"]
        if writes != last:
            last, at = writes, time.monotonic()
        await asyncio.sleep(0.25)


async def converged(kube: Kube) -> int:
    """Models with their Deployment and an observed status."""
    models = await kube.list(API, "llmmodels", NS)
    deployments = {d["metadata"]["name"] for d in await kube.list("apps/v1", "deployments", NS)}
    return sum(1 for m in models if (m.get("status") or {}).get("observedGeneration") == 1
               and m["metadata"]["name"] in deployments)


async def one_run(count: int, src: Path | None, *, port: int, resync: float, log: Path,
                  limit: float) -> dict[str, float]:
    with control_plane(controllers=False) as plane:
        plane.kubectl("apply", "-f", str(SCHEMAS))
        plane.kubectl("apply", "-f", str(ROOT / "config/crd/bases"))
        plane.kubectl("apply", "-k", str(ROOT / "config/priority"))  # the pods name llmop-normal
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.start_controller_manager()
        plane.kubectl("create", "namespace", NS)
        async with Kube(from_kubeconfig(str(plane.kubeconfig))) as kube, \
                aiohttp.ClientSession() as http:
            async with operator(plane, src, port, resync, log) as proc:
                while await reconciles(http, port) < 0:
                    await asyncio.sleep(0.1)
                mark, cpu0, start = plane.audit_mark(), cpu_seconds(proc.pid), time.monotonic()
                gate = asyncio.Semaphore(16)

                async def create(i: int) -> None:
                    doc = copy.deepcopy(TEMPLATE)
                    doc["metadata"] = {"name": f"model-{i:04d}", "namespace": NS}
                    async with gate:
                        await kube.request("POST", f"/apis/{API}/namespaces/{NS}/llmmodels",
                                           body=doc)

                await asyncio.gather(*(create(i) for i in range(count)))
                while (done_models := await converged(kube)) < count:
                    if time.monotonic() - start > limit:  # give up: report how far it got
                        return {"converge_s": math.inf, "converged": done_models,
                                "writes_create": operator_requests(plane, mark)["writes"]
                                / done_models, "cpu_ms": math.nan, "rss":
                                peak_rss_mib(proc.pid)}
                    await asyncio.sleep(1.0)  # two LISTs of N objects: not too often
                converge = time.monotonic() - start
                await quiet(plane, mark)
                created = operator_requests(plane, mark)
                cpu, done = cpu_seconds(proc.pid) - cpu0, await reconciles(http, port)
                # Steady state: resyncs over nothing that changes.
                steady_mark, before = plane.audit_mark(), done
                await asyncio.sleep(2.5 * resync)
                steady = operator_requests(plane, steady_mark)
                steady_reconciles = await reconciles(http, port) - before
                rss = peak_rss_mib(proc.pid)
            restart_mark = plane.audit_mark()
            async with operator(plane, src, port, resync, log) as proc:
                while await reconciles(http, port) < count:
                    await asyncio.sleep(0.25)
                await quiet(plane, restart_mark)
                restart = operator_requests(plane, restart_mark)
                rss = max(rss, peak_rss_mib(proc.pid))
    return {"converge_s": converge, "converged": count, "writes_create": created["writes"] / count,
            "reads_create": created["reads"] / count,
            "reads_per_resync": steady["reads"] / max(1.0, steady_reconciles),
            "writes_steady": steady["writes"], "writes_restart": restart["writes"] / count,
            "cpu_ms": cpu / max(1.0, done) * 1000, "reconciles": done, "rss": rss}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100,1000")
    parser.add_argument("--baseline", default="a9a349f",
                        help="git revision of the operator to compare with")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--resync", type=float, default=20.0,
                        help="both operators' --resync (the steady-state window is 2.5x)")
    parser.add_argument("--limit", type=float, default=600.0,
                        help="give a run up after this many seconds without converging")
    parser.add_argument("--metrics-port", type=int, default=18081)
    parser.add_argument("--log", type=Path, default=Path(tempfile.gettempdir()) /
                        "llmop-bench-operator.log", help="the operators' stderr")
    args = parser.parse_args()
    if not args.no_baseline and importlib.util.find_spec("kopf") is None:
        parser.error("the baseline needs kopf: pip install kopf (or --no-baseline)")
    rows: list[tuple[int, str, dict[str, float]]] = []
    with contextlib.ExitStack() as stack:
        trees: list[tuple[str, Path | None]] = [("this tree", None)]
        if not args.no_baseline:
            trees.insert(0, (f"kopf ({args.baseline})",
                             stack.enter_context(baseline_tree(args.baseline))))
        for size in (int(n) for n in args.sizes.split(",")):
            for name, src in trees:
                print(f">> {size} models, {name}", file=sys.stderr)
                rows.append((size, name, await one_run(
                    size, src, port=args.metrics_port, resync=args.resync, log=args.log,
                    limit=args.limit)))
    print(f"\nOperator benchmark on kube-apiserver v1.36 ({os.cpu_count()} CPUs; operator in "
          f"its own process; --resync {args.resync:g})\n")
    print("| models | operator | converge s | writes/model at create | reads/model at create "
          "| reads per resync reconcile | writes in steady state | writes/model after "
          "restart | CPU ms/reconcile | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for size, name, r in rows:
        if math.isinf(r["converge_s"]):
            print(f"| {size} | {name} | > {args.limit:.0f} ({r['converged']:.0f} converged) "
                  f"| {r['writes_create']:.2f} | — | — | — | — | — | {r['rss']:.0f} |")
            continue
        print(f"| {size} | {name} | {r['converge_s']:.1f} | {r['writes_create']:.2f} "
              f"| {r['reads_create']:.2f} | {r['reads_per_resync']:.2f} "
              f"| {r['writes_steady']:.0f} | {r['writes_restart']:.2f} | {r['cpu_ms']:.1f} "
              f"| {r['rss']:.0f} |")
    by = {(size, name): r for size, name, r in rows}
    for size in sorted({s for s, _, _ in rows}):
        pair = [by[k] for k in by if k[0] == size]
        if len(pair) == 2 and not math.isinf(pair[0]["converge_s"]):
            base, new = pair
            print(f"\n{size} models, this tree vs baseline: converge "
                  f"{base['converge_s'] / new['converge_s']:.1f}x faster, writes at create "
                  f"{new['writes_create'] / base['writes_create']:.2f}x, CPU per reconcile "
                  f"{new['cpu_ms'] / base['cpu_ms']:.2f}x")


if __name__ == "__main__":
    asyncio.run(main())
