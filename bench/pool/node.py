"""Model pool on the real node: a member swapped in against a pod's cold start from zero.

On the test node (tests/realnode.py; needs root), installed as the e2e suite installs it,
with the router (tests/e2e/router):

- the pool of examples/cluster/model-pool (three members of Gemma 3 270M, at most two
  loaded, one pod: llama-server's router mode at 1000m CPU, its two loaded members' 500m
  each) through the router's Service: first token of a streamed completion for a loaded
  member, and for a member not loaded (the three asked in turn, so each request unloads
  the least recently used one and loads the one asked for);
- the **baseline** a pool replaces: a copy of the Gemma example (the same file and CPU) at
  `minReplicas: 0` scaled to zero by the built-in autoscaler, then one streamed request
  through the router: the pod's cold start (bench/autoscaling/run.py's, reused);
- memory: the pool pod's anonymous memory (its memory cgroup) with two members loaded,
  against the baseline's pod, one model loaded (one pod per model would hold three of
  them); the weights, mapped from the file, are the page cache's and not counted.

    sudo python bench/pool/node.py [--rounds 5] [--wakes 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tools")]

import httpx2  # noqa: E402
import openai  # noqa: E402
from e2e_cluster import MODELS_NS, OPERATOR_NS, NodeCluster, installed  # noqa: E402

POOL = REPO / "examples" / "cluster" / "model-pool"
ENGINE = "gemma-small-pool"
MEMBERS = ["gemma-3-270m-qa", "gemma-3-270m-chat", "gemma-3-270m-long"]
PROMPT = "Q: What is the capital of France?\nA:"


def _autoscaling() -> ModuleType:
    """bench/autoscaling/run.py (its cold start), loaded by path: "run" is also ours."""
    spec = importlib.util.spec_from_file_location(
        "autoscaling_run", REPO / "bench" / "autoscaling" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_token(client: openai.OpenAI, model: str) -> float:
    """Seconds from sending a streamed completion to its first text."""
    sent = time.monotonic()
    stream = client.completions.create(model=model, prompt=PROMPT, max_tokens=8,
                                       temperature=0, stream=True)
    first = 0.0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].text and not first:
            first = time.monotonic() - sent
    return first


def loaded(engine: str) -> set[str]:
    body = httpx2.get(f"{engine}/models", timeout=10).json()
    return {m["id"] for m in body["data"] if m["status"]["value"] == "loaded"}


def pool_rounds(cluster: NodeCluster, router: str, rounds: int) -> dict[str, list[float]]:
    """First tokens through the router: each member in turn (a swap), then again (loaded)."""
    engine = cluster.service_url(MODELS_NS, ENGINE, 8000, "")
    client = openai.OpenAI(base_url=router, api_key="unused", timeout=300, max_retries=0)
    found: dict[str, list[float]] = {"swapped in": [], "loaded": []}
    for model in MEMBERS:  # warm: each loaded once, the page cache filled
        first_token(client, model)
    for _ in range(rounds):
        for model in MEMBERS:
            was_loaded = model in loaded(engine)
            found["loaded" if was_loaded else "swapped in"].append(first_token(client, model))
            found["loaded"].append(first_token(client, model))  # now it is
    client.close()
    return found


def pod_memory_mib(cluster: NodeCluster, selector: str) -> float:
    """The pod's anonymous memory (MiB), from its memory cgroup, read on the node.

    Not the weights: llama.cpp maps the GGUF file, whose pages sit in the node's page cache
    once, charged to the pod that read them first, whichever pods map them. Anonymous memory
    is what each engine process holds of its own (KV cache, compute buffers, vocabulary).
    cgroup v1 (the test node's: ``total_rss``) or v2 (``anon``).
    """
    (pod,) = cluster.json("-n", MODELS_NS, "get", "pods", "-l", selector)["items"]
    uid = pod["metadata"]["uid"]
    for root, key in ((Path("/sys/fs/cgroup/memory"), "total_rss"),
                      (Path("/sys/fs/cgroup"), "anon")):
        for name in (f"pod{uid}", f"pod{uid.replace('-', '_')}"):
            for found in root.rglob(f"*{name}*"):
                if (found / "memory.stat").is_file():
                    stat = dict(line.split() for line in
                                (found / "memory.stat").read_text().splitlines())
                    return int(stat[key]) / (1024 * 1024)
    raise LookupError(f"no memory cgroup for pod {pod['metadata']['name']} ({uid})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--wakes", type=int, default=3)
    args = parser.parse_args()
    autoscaling = _autoscaling()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.namespace(MODELS_NS)
        cluster.apply_kustomization(REPO / "tests" / "e2e" / "router", ["llmop-router"],
                                    OPERATOR_NS)
        cluster.kubectl("apply", "-f", str(POOL))
        for name in ("gemma-pool-qa", "gemma-pool-chat", "gemma-pool-long"):
            cluster.wait_phase(MODELS_NS, name, "Ready", 240)
        router = cluster.service_url(OPERATOR_NS, "llmop-router", 8080)
        swaps = pool_rounds(cluster, router, args.rounds)
        print(f"pool first tokens, seconds: {json.dumps(swaps)}", flush=True)
        pool_mib = pod_memory_mib(cluster, "ai.example.io/pool=gemma-small")
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(autoscaling.model_doc()))
        cluster.kubectl("-n", MODELS_NS, "wait", "--for=create",
                        f"deployment/{autoscaling.NAME}", "--timeout=60s")
        cluster.kubectl("-n", MODELS_NS, "rollout", "status",
                        f"deployment/{autoscaling.NAME}", "--timeout=240s")
        # its first request loads the model (llama-server maps the file at its first use)
        print(f"warm: {autoscaling.first_token(router)}", flush=True)
        one_mib = pod_memory_mib(cluster, f"ai.example.io/model-name={autoscaling.NAME}")
        colds = [r["total"] for r in autoscaling.cold_starts(cluster, router, args.wakes)]
    cold = statistics.median(colds)
    print("\nThe example pool on the test node (2 cores; the pool's pod 1000m CPU, the "
          f"baseline's 500m) through the router's Service; medians of {args.rounds} rounds "
          f"({args.wakes} cold starts)\n")
    print("| first token of a streamed completion | seconds | min-max | vs a cold start |")
    print("|---|---|---|---|")
    for label, values in (("a loaded member", swaps["loaded"]),
                          ("a member not loaded (swapped in)", swaps["swapped in"]),
                          ("a pod's cold start from zero (baseline)", colds)):
        median = statistics.median(values)
        print(f"| {label} | {median:.2f} | {min(values):.2f}-{max(values):.2f} | "
              f"{median / cold:.2f}x |")
    print("\n| anonymous memory (the pod's cgroup; the weights are the page cache's) | MiB |")
    print("|---|---|")
    print(f"| the pool: one pod, 2 of 3 members loaded | {pool_mib:.0f} |")
    print(f"| one pod per model: one of them | {one_mib:.0f} |")
    print(f"| one pod per model: three (3 x one) | {3 * one_mib:.0f} |")


if __name__ == "__main__":
    main()
