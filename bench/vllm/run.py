"""Real-node benchmark: vLLM's CPU build against llama.cpp, and vLLM's start with its compile cache.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it:

1. **Engines.** The Gemma 3 270M examples, one after the other alone on the node, each pod
   limited to 1 CPU: `examples/cluster/gemma-270m-vllm.yaml` (vLLM, BF16) and
   `examples/cluster/gemma-270m.yaml` (llama.cpp, Q4_K_M, the **baseline**, given 8 parallel
   slots). At 1, 4 and 8 concurrent clients, rounds of 32-token completions (temperature 0,
   no early stop): output tokens per second over the round and the median request latency.
2. **Start.** vLLM's pod from `kubectl apply` to its first token (a cold torch.compile), then
   its engine SIGKILLed in the pod and restarted by the kubelet: restart to first token with
   the compile cache kept on the model-cache volume (`VLLM_CACHE_ROOT`).

    python bench/vllm/run.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import signal
import statistics
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "tools")]

import yaml  # noqa: E402
from e2e_cluster import (  # noqa: E402
    GEMMA,
    GEMMA_VLLM,
    MODELS_NS,
    NodeCluster,
    installed,
)

PROMPT = "Once upon a time"
CONCURRENCY = (1, 4, 8)


def complete(url: str, model: str, max_tokens: int) -> tuple[float, int]:
    """One completion: (seconds, output tokens)."""
    body = json.dumps({"model": model, "prompt": PROMPT, "temperature": 0,
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=300) as response:
        tokens = int(json.load(response)["usage"]["completion_tokens"])
    return time.perf_counter() - started, tokens


def first_token(url: str, model: str, deadline: float) -> float:
    """When the model first answers a 1-token completion (polled every 0.2 s)."""
    while time.monotonic() < deadline:
        try:
            complete(url, model, 1)
            return time.monotonic()
        except OSError:
            time.sleep(0.2)  # not serving yet: no event to wait on from outside the pod
    raise TimeoutError(f"{model} did not answer")


def round_of(url: str, model: str, clients: int, max_tokens: int) -> tuple[float, float]:
    """``clients`` concurrent completions: (output tokens/s over the round, median s)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda _: complete(url, model, max_tokens), range(clients)))
    wall = time.perf_counter() - started
    return sum(t for _, t in results) / wall, statistics.median(s for s, _ in results)


def _apply(cluster: NodeCluster, source: Path, name: str, patch: dict[str, object]) -> str:
    doc = copy.deepcopy(yaml.safe_load(source.read_text()))
    doc["metadata"]["name"] = name
    doc["spec"]["mcpExposure"] = {"enabled": False}
    for key, value in patch.items():
        doc["spec"][key] = value if not isinstance(value, dict) else {
            **doc["spec"].get(key, {}), **value}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    return str(doc["spec"]["modelId"])


def engines(cluster: NodeCluster, rounds: int, max_tokens: int) -> None:
    """Each engine alone on the node (two 1-CPU pods and the operator do not fit 2 cores)."""
    shapes = {
        "vLLM (BF16)": (GEMMA_VLLM, {"engineArgs": {"max-num-seqs": "8"}}),
        "llama.cpp (Q4_K_M, baseline)": (GEMMA, {
            "resources": {"cpuMillicores": 1000, "memoryGiB": 2},  # 8 slots' KV: ~1.1 GiB
            "llamaCpp": {"parallelSlots": 8}}),
    }
    rates: dict[tuple[str, int], list[float]] = {}
    latencies: dict[tuple[str, int], list[float]] = {}
    for engine, (source, patch) in shapes.items():
        model = _apply(cluster, source, "bench-engine", patch)
        cluster.wait_phase(MODELS_NS, "bench-engine", "Ready", 420)
        url = cluster.service_url(MODELS_NS, "bench-engine", 8000)
        round_of(url, model, 2, max_tokens)  # warm-up
        for clients in CONCURRENCY:
            for _ in range(rounds):
                rate, latency = round_of(url, model, clients, max_tokens)
                rates.setdefault((engine, clients), []).append(rate)
                latencies.setdefault((engine, clients), []).append(latency)
        cluster.kubectl("-n", MODELS_NS, "delete", "llmmodel", "bench-engine", "--wait=true")
        cluster.kubectl("-n", MODELS_NS, "wait", "--for=delete", "pods", "-l",
                        "app=bench-engine", "--timeout=120s", check=False)
    print(f"\nGemma 3 270M, pod limit 1 CPU, each engine alone on the 2-core node, "
          f"{max_tokens}-token completions, medians of {rounds} rounds\n")
    print("| engine | clients | output tokens/s | vs baseline | median latency s |")
    print("|---|---|---|---|---|")
    for clients in CONCURRENCY:
        base = statistics.median(rates[("llama.cpp (Q4_K_M, baseline)", clients)])
        for engine in shapes:
            rate = statistics.median(rates[(engine, clients)])
            print(f"| {engine} | {clients} | {rate:.1f} | {rate / base:.2f}x | "
                  f"{statistics.median(latencies[(engine, clients)]):.2f} |")


def start(cluster: NodeCluster) -> None:
    applied = time.monotonic()
    model = _apply(cluster, GEMMA_VLLM, "bench-start", {})
    cluster.wait_phase(MODELS_NS, "bench-start", "Ready", 420)
    url = cluster.service_url(MODELS_NS, "bench-start", 8000)  # waits until it accepts
    cold = first_token(url, model, time.monotonic() + 60) - applied
    (pod,) = cluster.json("-n", MODELS_NS, "get", "pods", "-l", "app=bench-start")["items"]
    killed = time.monotonic()
    assert cluster.node.signal_in_pod(pod["metadata"]["uid"], "api_server", signal.SIGKILL)
    time.sleep(1)  # the Service keeps the pod until its readiness probe fails
    warm = first_token(url, model, time.monotonic() + 420) - killed
    print("\nvLLM (Gemma 3 270M, 1 CPU): to the first token\n")
    print("| start | seconds | vs cold |")
    print("|---|---|---|")
    print(f"| apply, new pod, cold torch.compile (baseline) | {cold:.1f} | 1.00x |")
    print(f"| engine killed, restarted, compile cache on the volume | {warm:.1f} | "
          f"{warm / cold:.2f}x |")
    cluster.kubectl("-n", MODELS_NS, "delete", "llmmodel", "bench-start", "--wait=true")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--only", choices=["start", "engines"], help="one part only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.wait_for_images()
        if args.only != "engines":
            start(cluster)
        if args.only != "start":
            engines(cluster, args.rounds, args.max_tokens)


if __name__ == "__main__":
    main()
