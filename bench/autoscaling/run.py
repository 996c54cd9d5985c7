"""Real-node benchmark: the built-in autoscaler's cold start and its steadiness under load.

On the test node (tests/realnode.py; needs root), installed as the e2e suite installs it
(no KEDA: the operator's built-in autoscaler, stabilization window 15 s), with the router:

1. **Cold start.** A copy of the Gemma 3 270M example at `minReplicas: 0` is left to go
   idle; then one streamed request goes through the router. A pod watch timestamps the
   pod's creation and its Ready transition as they arrive. The **floor** is the pod's own
   start (created -> Ready: init containers, image, llama-server loading); the request's
   first token is compared with it.
2. **Steady load.** `--clients` clients send completions back to back through the router
   for `--minutes`; the bench reads the router's `GET /scale` every second. Scale changes
   made by the operator are counted (from its Events) after the first scale-up, and the same
   recorded signal is replayed through the same decision function with no stabilization
   window (the **baseline**: a naive autoscaler that follows the instantaneous load).

    sudo python bench/autoscaling/run.py [--wakes 5] [--clients 5] [--minutes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tools")]

import openai  # noqa: E402
import yaml  # noqa: E402
from e2e_cluster import (  # noqa: E402
    GEMMA,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    installed,
)
from load import SteadyLoad  # noqa: E402

from llm_operator.reconcile.autoscaling import Memory, Observation, Policy, step  # noqa: E402

from controlplane import kubectl_path  # noqa: E402

NAME, MODEL_ID = "gemma-auto", "gemma-3-270m-auto"
ROUTER_KUSTOMIZATION = REPO / "tests" / "e2e" / "router"
COOLDOWN, THRESHOLD, WINDOW = 10, 4, 15.0


@contextlib.contextmanager
def pod_times(cluster: NodeCluster) -> Iterator[dict[str, dict[str, float]]]:
    """Pod name -> {"created": t, "ready": t} as a `kubectl get pods --watch` reports them."""
    times: dict[str, dict[str, float]] = {}
    proc = subprocess.Popen(
        [kubectl_path(), f"--kubeconfig={cluster.plane.kubeconfig}", "-n", MODELS_NS, "get",
         "pods", "-l", f"ai.example.io/model-name={NAME}", "--watch", "-o",
         'jsonpath={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}'],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            now = time.time()
            name, _, ready = line.strip().partition(" ")
            seen = times.setdefault(name, {"created": now})
            if ready == "True":
                seen.setdefault("ready", now)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield times
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)


def replicas(cluster: NodeCluster, n: int, timeout: int = 180) -> None:
    cluster.kubectl("-n", MODELS_NS, "wait", f"deployment/{NAME}", f"--timeout={timeout}s",
                    f"--for=jsonpath={{.spec.replicas}}={n}")


def first_token(router: str) -> tuple[float, float]:
    """(when the request was sent, when its first token came), wall clock."""
    client = openai.OpenAI(base_url=router, api_key="unused", timeout=300)
    sent = time.time()
    stream = client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8,
        temperature=0, stream=True)
    first = 0.0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and not first:
            first = time.time()
    client.close()
    return sent, first


def cold_starts(cluster: NodeCluster, router: str, wakes: int) -> list[dict[str, float]]:
    rounds = []
    for _ in range(wakes):
        replicas(cluster, 0)
        cluster.kubectl("-n", MODELS_NS, "wait", "--for=delete", "pod", "-l",
                        f"ai.example.io/model-name={NAME}", "--timeout=120s", check=False)
        with pod_times(cluster) as times:
            sent, first = first_token(router)
        pod = next(t for t in times.values() if t["created"] >= sent - 0.5 and "ready" in t)
        rounds.append({"to_pod": pod["created"] - sent, "pod_start": pod["ready"] -
                       pod["created"], "ready_to_token": first - pod["ready"],
                       "total": first - sent})
    return rounds


def scale_events(cluster: NodeCluster) -> list[str]:
    items = cluster.json("-n", MODELS_NS, "get", "events", "--field-selector",
                         f"reason=Scaled,involvedObject.name={NAME}")["items"]
    items.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [str(e["message"]) for e in items]


def pending(router: str) -> int:
    url = router.removesuffix("/v1") + f"/scale/{MODELS_NS}/{NAME}"
    with urllib.request.urlopen(url, timeout=5) as r:
        return int(json.load(r)["pending"])


async def steady(cluster: NodeCluster, router: str, clients: int, minutes: float
                 ) -> tuple[int, list[tuple[float, int]], int, str]:
    """(the operator's changes after the first scale-up, the signal, requests, outcomes)."""
    load = SteadyLoad(router, MODEL_ID, clients=clients, max_tokens=32, timeout=120)
    signal: list[tuple[float, int]] = []
    async with load.running():
        await asyncio.to_thread(replicas, cluster, 2)
        before = len(scale_events(cluster))
        end = time.monotonic() + minutes * 60
        while time.monotonic() < end:
            signal.append((time.monotonic(), await asyncio.to_thread(pending, router)))
            await asyncio.sleep(1)
        changes = len(scale_events(cluster)) - before
    return changes, signal, len(load.outcomes), str(dict(load.summary()))


def naive_changes(signal: list[tuple[float, int]], start: int) -> int:
    """The same signal through the same step function with no stabilization window."""
    policy = Policy(0, 2, THRESHOLD, COOLDOWN, stabilization_seconds=0.0)
    current, memory, changes = start, Memory(), 0
    for now, value in signal:
        decision = step(policy, Observation(now, current, value), memory)
        memory = decision.memory
        if decision.replicas != current:
            changes, current = changes + 1, decision.replicas
    return changes


def model_doc() -> dict[str, Any]:
    doc = copy.deepcopy(yaml.safe_load(GEMMA.read_text()))
    doc["metadata"]["name"] = NAME
    doc["spec"].update({"modelId": MODEL_ID, "mcpExposure": {"enabled": False}, "scaling": {
        "minReplicas": 0, "maxReplicas": 2, "scaleUpThreshold": THRESHOLD,
        "cooldownPeriodSeconds": COOLDOWN}})
    return doc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wakes", type=int, default=5)
    parser.add_argument("--clients", type=int, default=5)
    parser.add_argument("--minutes", type=float, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.apply_kustomization(ROUTER_KUSTOMIZATION, ["llmop-router"], OPERATOR_NS)
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(model_doc()))
        cluster.kubectl("-n", MODELS_NS, "wait", "--for=create", f"deployment/{NAME}",
                        "--timeout=60s")
        router = cluster.service_url(OPERATOR_NS, "llmop-router", 8080)
        rounds = cold_starts(cluster, router, args.wakes)
        changes, signal, requests, outcomes = asyncio.run(
            steady(cluster, router, args.clients, args.minutes))
    print(f"\nBuilt-in autoscaler on the test node (2 cores), Gemma 3 270M at minReplicas 0, "
          f"500m CPU per pod; medians of {args.wakes} cold starts\n")
    print("| cold start, seconds | median | min | max |")
    print("|---|---|---|---|")
    for key, label in (("to_pod", "request sent -> pod created (router hold, autoscaler "
                                  "look, scale write, ReplicaSet)"),
                       ("pod_start", "pod created -> Ready (the floor: init, load)"),
                       ("ready_to_token", "pod Ready -> first token"),
                       ("total", "request sent -> first token")):
        values = [r[key] for r in rounds]
        print(f"| {label} | {statistics.median(values):.2f} | {min(values):.2f} | "
              f"{max(values):.2f} |")
    naive = naive_changes(signal, 2)
    load = [v for _, v in signal]
    print(f"\nSteady load: {args.clients} clients back to back for {args.minutes:g} min "
          f"({requests} requests, {outcomes}); router pending per second: median "
          f"{statistics.median(load):g}, range {min(load)}-{max(load)}; "
          f"threshold {THRESHOLD} per replica\n")
    print("| autoscaler | scale changes | per minute |")
    print("|---|---|---|")
    print(f"| built-in (stabilization {WINDOW:g} s) | {changes} | "
          f"{changes / args.minutes:.2f} |")
    print(f"| no stabilization window (baseline, same signal replayed) | {naive} | "
          f"{naive / args.minutes:.2f} |")


if __name__ == "__main__":
    main()
