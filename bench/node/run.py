"""Real-node benchmark: llama-server's CPU threads under a pod's CPU limit.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it serves the Gemma 3 270M example twice, side by side, each pod limited to
500m CPU: once as rendered (`--threads` from `cpuMillicores`: 1), once with
`engineArgs.threads: "2"`, what llama-server does by itself on this 2-core node (a thread
per core it sees; the **baseline**). Rounds alternate between the two Services; each is one
64-token completion (temperature 0); medians of the tokens per second llama-server reports.

    python bench/node/run.py [--rounds 15] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "tools")]

import yaml  # noqa: E402
from e2e_cluster import (  # noqa: E402
    GEMMA,
    GEMMA_ID,
    MODELS_NS,
    installed,
)

VARIANTS = {"threads-from-cpu-limit": None, "threads-per-node-core (baseline)": "2"}


def tokens_per_second(url: str, max_tokens: int) -> float:
    body = json.dumps({"model": GEMMA_ID, "prompt": "Once upon a time", "temperature": 0,
                       "max_tokens": max_tokens, "ignore_eos": True}).encode()
    request = urllib.request.Request(f"{url}/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return float(json.load(response)["timings"]["predicted_per_second"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        urls = {}
        for index, (variant, threads) in enumerate(VARIANTS.items()):
            doc = copy.deepcopy(yaml.safe_load(GEMMA.read_text()))
            doc["metadata"]["name"] = name = f"gemma-{index}"
            if threads:
                doc["spec"]["engineArgs"]["threads"] = threads
            cluster.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
            cluster.wait_phase(MODELS_NS, name, "Ready", 180)
            urls[variant] = cluster.service_url(MODELS_NS, name, 8000)
        samples: dict[str, list[float]] = {v: [] for v in VARIANTS}
        for url in urls.values():  # warm-up
            tokens_per_second(url, args.max_tokens)
        for _ in range(args.rounds):
            for variant, url in urls.items():
                samples[variant].append(tokens_per_second(url, args.max_tokens))
    baseline = statistics.median(samples["threads-per-node-core (baseline)"])
    print(f"\nGemma 3 270M Q4_K_M on llama-server, pod limit 500m CPU, 2-core node, "
          f"{args.max_tokens}-token completions, medians of {args.rounds} alternating rounds\n")
    print("| llama-server threads | tokens/s | vs baseline | p25-p75 |")
    print("|---|---|---|---|")
    for variant, values in samples.items():
        q = statistics.quantiles(values, n=4)
        print(f"| {variant} | {statistics.median(values):.1f} | "
              f"{statistics.median(values) / baseline:.2f}x | {q[0]:.1f}-{q[2]:.1f} |")


if __name__ == "__main__":
    main()
