"""Flow control on the real node: the router's Service with two replicas, in front of Gemma.

On the test node (tests/realnode.py; needs root), the operator installed as the e2e suite
installs it, the Gemma 3 270M example (llama.cpp, one slot at its 500m CPU) and the
router (tests/e2e/router) scaled to two replicas: clients reach them through the router's
Service, as pods would, and kube-proxy spreads their connections over both. Every client
is closed-loop (bench/flow/run.py's), each request the same length with EOS ignored.

(b) two fairness IDs in one band (x-gateway-inference-fairness-id): the light ID's 2
    clients beside 40 of a heavy ID, against the reference of the light ID beside as many
    heavy clients as there are slots (the engine full, nothing of theirs queued): failed
    light requests (goal 0) and the light p50 (goal <= 1.3x).
(d) throughput: 16 closed-loop clients of 24-token completions straight at the model's
    Service (llama-server's own queue, the **baseline**) and through the router's;
    alternating rounds, medians (goal >= 0.97x).

    python bench/flow/node.py [--seconds 30] [--warmup 5] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path[:0] = [str(HERE), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tools")]

from e2e_cluster import (  # noqa: E402
    GEMMA,
    GEMMA_ID,
    GEMMA_NAME,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    installed,
)
from run import FAIRNESS, Group, pct, run_load, throughput  # noqa: E402  (bench/flow/run.py)

ROUTERS = 2
SLOTS = 1  # the example's llama-server at 500m CPU
LIGHT, HEAVY = 2, 40
TOKENS = 24


def router_up(cluster: NodeCluster) -> str:
    """The router installed as the e2e suite installs it, at two replicas: its address."""
    cluster.apply_kustomization(REPO / "tests" / "e2e" / "router", ["llmop-router"],
                                OPERATOR_NS)
    cluster.kubectl("-n", OPERATOR_NS, "scale", "deployment/llmop-router",
                    f"--replicas={ROUTERS}")
    cluster.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                    "--timeout=120s")
    return cluster.service_url(OPERATOR_NS, "llmop-router", 8080, path="")


async def light_beside_heavy(router: str, warmup: float, seconds: float) -> None:
    light_id, heavy_id = {FAIRNESS: "light"}, {FAIRNESS: "heavy"}
    print(f"\n(b) through the router's Service ({ROUTERS} replicas), the example's llama-server "
          f"({SLOTS} slot), {TOKENS}-token requests, {seconds:g} s windows after "
          f"{warmup:g} s warm-up\n")
    print("| case | light p50 (s) | vs ref | light p99 (s) | light done | light failed | "
          "heavy done | heavy failed |")
    print("|---|---|---|---|---|---|---|---|")
    reference = 0.0
    for title, heavy in ((f"reference: light ID {LIGHT} + heavy ID {SLOTS}", SLOTS),
                         (f"light ID {LIGHT} + heavy ID {HEAVY}", HEAVY)):
        light, flood = Group("light", LIGHT, light_id), Group("heavy", heavy, heavy_id)
        await run_load(router, [light, flood], warmup, seconds, TOKENS, model=GEMMA_ID)
        p50 = pct(light.latencies, 0.5)
        reference = reference or p50
        print(f"| {title} | {p50:.2f} | {p50 / (reference or 1):.2f}x | "
              f"{pct(light.latencies, 0.99):.2f} | {len(light.latencies)} | {light.errors} | "
              f"{flood.completed} | {flood.errors} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp)) as cluster:
        cluster.kubectl("apply", "-f", str(GEMMA))
        cluster.wait_phase(MODELS_NS, GEMMA_NAME, "Ready", 180)
        router = router_up(cluster)
        direct = cluster.service_url(MODELS_NS, GEMMA_NAME, 8000, path="")
        asyncio.run(light_beside_heavy(router, args.warmup, args.seconds))
        asyncio.run(throughput({"the model's Service": direct,
                                f"the router's Service ({ROUTERS} replicas)": router},
                               args.warmup, args.seconds, args.rounds, model=GEMMA_ID))


if __name__ == "__main__":
    main()
