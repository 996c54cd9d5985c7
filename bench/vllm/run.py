"""Real-node benchmark: vLLM's CPU build against llama.cpp, and vLLM's start with its compile cache.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it:

1. **Engines.** The Gemma 3 270M examples, one after the other alone on the node, each pod
   limited to 1 CPU: `examples/cluster/gemma-270m-vllm.yaml` (vLLM, BF16) and
   `examples/cluster/gemma-270m.yaml` (llama.cpp, Q4_K_M, the **baseline**, given 8 parallel
   slots). At 1, 4 and 8 concurrent clients, rounds of 32-token completions (temperature 0,
   no early stop): output tokens per second over the round and the median request latency.
2. **Start.** vLLM's pod from `kubectl apply` to its first token with the node's compile
   cache emptied (a cold torch.compile, the **baseline**); its engine SIGKILLed in the pod
   and restarted by the kubelet (the compile cache on the pod's volume, first round only);
   then the model deleted and applied again: a new pod that finds the graphs in the node's
   compile cache (`compileCache.hostPath`). ``--rounds`` of each, alternating.
3. **Prefix.** The vLLM example at two replicas behind the router (`tests/e2e/router`), each
   replica's KV cache capped (`num-gpu-blocks-override`) so that it holds about 5 of the
   workload's 8 long prefixes (~1,300 tokens each: a shared system prompt per tenant) and the
   two together hold all of them. One client, requests in a seeded random order of the
   prefixes, each a 1-token completion: its latency is the time to first token. The router's
   `prefix-cache` against `least-load` (the **baseline**; with one client every replica is
   idle, so ties rotate: round robin), each with its own prefixes, after one pass that shows
   each prefix once. vLLM on CPU starts with prefix caching on.

    python bench/vllm/run.py [--rounds 3] [--only start|engines|prefix]
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import shutil
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
COMPILE_CACHE = Path("/var/cache/llm-operator/compile")  # tests/e2e/install/settings.yaml
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
        # no torch.compile warm-up at start, no compiled graphs after (vLLM's CPU platform
        # sets its compilation mode to none)
        "vLLM (BF16, enforce-eager)": (GEMMA_VLLM, {"engineArgs": {
            "max-num-seqs": "8", "enforce-eager": "true"}}),
        "llama.cpp (Q4_K_M, baseline)": (GEMMA, {
            "resources": {"cpuMillicores": 1000, "memoryGiB": 2},  # 8 slots' KV: ~1.1 GiB
            "llamaCpp": {"parallelSlots": 8}}),
    }
    rates: dict[tuple[str, int], list[float]] = {}
    latencies: dict[tuple[str, int], list[float]] = {}
    ready: dict[str, float] = {}
    for engine, (source, patch) in shapes.items():
        applied = time.monotonic()
        model = _apply(cluster, source, "bench-engine", patch)
        cluster.wait_phase(MODELS_NS, "bench-engine", "Ready", 420)
        ready[engine] = time.monotonic() - applied
        url = cluster.service_url(MODELS_NS, "bench-engine", 8000)
        round_of(url, model, 2, max_tokens)  # warm-up
        for clients in CONCURRENCY:
            for _ in range(rounds):
                rate, latency = round_of(url, model, clients, max_tokens)
                rates.setdefault((engine, clients), []).append(rate)
                latencies.setdefault((engine, clients), []).append(latency)
        _delete_model(cluster, "bench-engine")
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
    print("\n| engine | `kubectl apply` to Ready, s |\n|---|---|")
    for engine, seconds in ready.items():
        print(f"| {engine} | {seconds:.0f} |")


def _first_token_after_apply(cluster: NodeCluster) -> tuple[float, str]:
    """The example applied as ``bench-start``: seconds to its first token, and its model."""
    applied = time.monotonic()
    model = _apply(cluster, GEMMA_VLLM, "bench-start", {})
    cluster.wait_phase(MODELS_NS, "bench-start", "Ready", 420)
    url = cluster.service_url(MODELS_NS, "bench-start", 8000)  # waits until it accepts
    return first_token(url, model, time.monotonic() + 60) - applied, model


def _delete_model(cluster: NodeCluster, name: str) -> None:
    """The bench's model deleted, and its pods gone (the next one has the node to itself)."""
    cluster.kubectl("-n", MODELS_NS, "delete", "llmmodel", name, "--wait=true")
    cluster.kubectl("-n", MODELS_NS, "wait", "--for=delete", "pods", "-l", f"app={name}",
                    "--timeout=120s", check=False)


def start(cluster: NodeCluster, rounds: int) -> None:
    """Cold starts (the node's compile cache emptied) against new pods that find it filled.

    The install sets ``compileCache.hostPath`` (tests/e2e/install/settings.yaml); the
    first round also restarts the engine inside its pod (the cache on the pod's volume).
    """
    node_cache = COMPILE_CACHE / MODELS_NS
    cold: list[float] = []
    warm: list[float] = []
    restarted = 0.0
    for round_ in range(rounds):
        shutil.rmtree(node_cache, ignore_errors=True)
        seconds, model = _first_token_after_apply(cluster)
        cold.append(seconds)
        if round_ == 0:
            url = cluster.service_url(MODELS_NS, "bench-start", 8000)
            (pod,) = cluster.json("-n", MODELS_NS, "get", "pods", "-l",
                                  "app=bench-start")["items"]
            killed = time.monotonic()
            assert cluster.node.signal_in_pod(pod["metadata"]["uid"], "api_server",
                                              signal.SIGKILL)
            time.sleep(1)  # the Service keeps the pod until its readiness probe fails
            restarted = first_token(url, model, time.monotonic() + 420) - killed
        _delete_model(cluster, "bench-start")
        warm.append(_first_token_after_apply(cluster)[0])
        _delete_model(cluster, "bench-start")
        print(f"round {round_ + 1}: cold {cold[-1]:.1f} s, new pod with the node's cache "
              f"{warm[-1]:.1f} s", flush=True)
    base = statistics.median(cold)
    print(f"\nvLLM (Gemma 3 270M, 1 CPU): to the first token, medians of {rounds}\n")
    print("| start | seconds | each | vs cold |")
    print("|---|---|---|---|")
    print(f"| apply, new pod, cold torch.compile (baseline) | {base:.1f} | "
          f"{' / '.join(f'{c:.0f}' for c in cold)} | 1.00x |")
    print(f"| engine killed, restarted, compile cache on the pod's volume | {restarted:.1f} | "
          f"{restarted:.0f} | {restarted / base:.2f}x |")
    new = statistics.median(warm)
    print(f"| apply, new pod, the node's compile cache (`compileCache.hostPath`) | {new:.1f} | "
          f"{' / '.join(f'{w:.0f}' for w in warm)} | {new / base:.2f}x |")


PREFIXES = 8  # distinct long prefixes: about 5 fit one replica's capped cache, all fit two
KV_BLOCKS = "320"  # 6,488 tokens of KV per replica (vLLM's log): ~5 of these prefixes
PASSES = 4  # measured passes over the prefixes, after the first
HIT_SECONDS = 0.5  # a 1-token answer this fast found its prefix cached (a miss: ~1 s)
WORDS = ("river", "stone", "garden", "quiet", "lamp", "winter", "harbor", "letter", "clock",
         "meadow", "copper", "signal", "orchard", "ladder", "velvet", "canyon")


def _prefix(seed: int) -> str:
    """A tenant's system prompt: ~1,300 tokens of words, different for every seed."""
    pick = random.Random(seed)
    return "System: " + " ".join(pick.choice(WORDS) for _ in range(1200)) + "\n"


def _ttfts(url: str, model: str, prompts: list[str]) -> list[float]:
    out = []
    for prompt in prompts:
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1,
                           "temperature": 0}).encode()
        request = urllib.request.Request(f"{url}/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        started = time.perf_counter()
        with urllib.request.urlopen(request, timeout=300) as response:
            response.read()
        out.append(time.perf_counter() - started)
    return out


def prefix(cluster: NodeCluster) -> None:
    """prefix-cache against least-load on two replicas whose caches hold ~5 of 8 prefixes."""
    from e2e_cluster import OPERATOR_NS  # noqa: PLC0415

    shape = {"resources": {"cpuMillicores": 800, "memoryGiB": 6},
             "scaling": {"minReplicas": 2, "maxReplicas": 2},
             "engineArgs": {"max-num-seqs": "4", "num-gpu-blocks-override": KV_BLOCKS}}
    cluster.apply_kustomization(REPO / "tests" / "e2e" / "router", ["llmop-router"],
                                OPERATOR_NS)
    results: dict[str, tuple[list[float], list[float]]] = {}
    strategies = ("least-load", "prefix-cache")
    for n, strategy in enumerate(strategies):
        model = _apply(cluster, GEMMA_VLLM, "bench-prefix",
                       {**shape, "routing": {"strategy": strategy}})
        cluster.wait_phase(MODELS_NS, "bench-prefix", "Ready", 420)
        cluster.kubectl("-n", MODELS_NS, "rollout", "status", "deployment/bench-prefix",
                        "--timeout=420s")
        url = cluster.service_url(OPERATOR_NS, "llmop-router", 8080)
        prefixes = [_prefix(1000 * (n + 1) + i) for i in range(PREFIXES)]
        first = _ttfts(url, model, [p + "Q: who?\nA:" for p in prefixes])
        order = random.Random(n).choices(range(PREFIXES), k=PREFIXES * PASSES)
        measured = _ttfts(url, model, [prefixes[i] + f"Q: {k}?\nA:"
                                       for k, i in enumerate(order)])
        results[strategy] = (first, measured)
    cluster.kubectl("-n", MODELS_NS, "delete", "llmmodel", "bench-prefix", "--wait=true")
    base = statistics.mean(results["least-load"][1])
    print(f"\nvLLM (Gemma 3 270M, 2 replicas of 800m, KV capped at {KV_BLOCKS} blocks), "
          f"{PREFIXES} prefixes of ~1,300 tokens, one client, time to first token through "
          f"the router ({PREFIXES * PASSES} requests after a first pass; a miss takes "
          f"over {HIT_SECONDS} s)\n")
    print("| router strategy | first pass median s | mean s | median s | p90 s | misses | "
          "mean vs baseline |")
    print("|---|---|---|---|---|---|---|")
    for strategy in strategies:
        first, measured = results[strategy]
        mean = statistics.mean(measured)
        p90 = statistics.quantiles(measured, n=10)[-1]
        misses = sum(t > HIT_SECONDS for t in measured)
        label = f"{strategy}{' (baseline)' if strategy == 'least-load' else ''}"
        print(f"| {label} | {statistics.median(first):.3f} | {mean:.3f} | "
              f"{statistics.median(measured):.3f} | {p90:.3f} | {misses} of {len(measured)} | "
              f"{base / mean:.2f}x faster |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--only", choices=["start", "engines", "prefix"], help="one part only")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.wait_for_images()
        if args.only in (None, "start"):
            start(cluster, args.rounds)
        if args.only in (None, "engines"):
            engines(cluster, args.rounds, args.max_tokens)
        if args.only in (None, "prefix"):
            prefix(cluster)


if __name__ == "__main__":
    main()
