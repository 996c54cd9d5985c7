"""On the real node: a light client served in its turn beside a heavy one, through two routers.

The router's Deployment at two replicas behind its Service (kube-proxy spreads the
connections), the Gemma example behind them with its one llama.cpp slot. A heavy fairness
ID (GIE's x-gateway-inference-fairness-id) keeps a queue of closed-loop requests in both
replicas; a light ID's requests, sent one after the other, are each sent next by the
replica that has it (flow control takes the ID holding least first). So a light request
waits for the request in the slot and what each replica let into llama.cpp's own queue
(its engine queue, at most one request here: docs/flow-control.md), not for the heavy
queue: first come, first served (what the engine's own queue does) would make it wait for
all of it (10 heavy clients: ~11 services). Seen on a 2-core machine: 7.4 s at the
median beside 10 heavy clients for a request that takes 1.8 s alone, about 4 services.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Iterator

import openai
import pytest
from e2e_cluster import GEMMA_ID, OPERATOR_NS, NodeCluster
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e
FAIRNESS = "x-gateway-inference-fairness-id"
HEAVY = 10  # closed-loop clients of the heavy ID: a queue of ~9 behind the one slot
TOKENS = 24  # every request the same length (EOS ignored): latency is wait + one service
ROUTERS = 2


@pytest.fixture(scope="module")
def two_routers(routed: NodeCluster) -> Iterator[NodeCluster]:
    """The router at two replicas, both ready (back to one afterwards)."""
    routed.kubectl("-n", OPERATOR_NS, "scale", "deployment/llmop-router",
                   f"--replicas={ROUTERS}")
    routed.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                   "--timeout=120s")
    try:
        yield routed
    finally:
        routed.kubectl("-n", OPERATOR_NS, "scale", "deployment/llmop-router", "--replicas=1")


def answered(cluster: NodeCluster) -> dict[str, float]:
    """Each router pod's answered requests (200) so far, from its own /metrics."""
    pods = cluster.json("-n", OPERATOR_NS, "get", "pods", "-l",
                        "app=llmop-router")["items"]
    counts = {}
    for pod in pods:
        if pod["status"].get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        text = cluster.kubectl("get", "--raw", f"/api/v1/namespaces/{OPERATOR_NS}/pods/"
                               f"{pod['metadata']['name']}:8080/proxy/metrics")
        counts[pod["metadata"]["name"]] = sum(
            s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "llmop_gateway_requests_total" and s.labels.get("status") == "200")
    return counts


async def test_a_light_client_is_served_in_its_turn_beside_a_heavy_one_through_two_routers(
        two_routers: NodeCluster) -> None:
    base = two_routers.service_url(OPERATOR_NS, "llmop-router", 8080)
    before = answered(two_routers)
    assert len(before) == ROUTERS, before
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300, max_retries=0)

    async def ask(fairness_id: str) -> float:
        sent = time.monotonic()
        await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=TOKENS, temperature=0,
            extra_body={"ignore_eos": True}, extra_headers={FAIRNESS: fairness_id})
        return time.monotonic() - sent

    async with client:
        alone = [await ask("light") for _ in range(3)]
        stop, warm = asyncio.Event(), asyncio.Event()
        heavy_done = 0

        async def heavy() -> None:
            nonlocal heavy_done
            while not stop.is_set():
                await ask("heavy")
                heavy_done += 1
                if heavy_done >= ROUTERS:  # the queue has formed: requests of every client
                    warm.set()             # are in, and answers come one service apart

        flood = [asyncio.create_task(heavy()) for _ in range(HEAVY)]
        try:
            async with asyncio.timeout(240):
                await warm.wait()
            beside = [await ask("light") for _ in range(5)]
        finally:
            stop.set()
            await asyncio.gather(*flood)
    after = answered(two_routers)
    service = statistics.median(alone)
    # fair: the request in the slot, each replica's engine queue, then this one (~4
    # services); first come, first served: the ~10 of the heavy ID before it
    assert statistics.median(beside) <= 6 * service, json.dumps(
        {"alone": alone, "beside": beside, "heavy answered": heavy_done})
    assert all(after[pod] > before[pod] for pod in before), (before, after)  # both served
