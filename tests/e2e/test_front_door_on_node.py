"""On the real node: a light client served in its turn beside a heavy one, through two routers.

The router's Deployment at two replicas behind its Service (kube-proxy spreads the
connections), the Gemma example behind them with its one llama.cpp slot. A heavy fairness
ID (GIE's x-gateway-inference-fairness-id) sends closed-loop requests through both
replicas; a light ID's requests, sent one after the other, land on either. The replica that
does not own the model's queue passes its requests to the one that does
(gateway/routing/owners.py), so they all wait in one queue, where flow control sends the light ID's
next: a light request waits for the request in the slot and what is in llama.cpp's own
queue (at most one request here: docs/flow-control.md), not for the heavy queue. When each
replica held its own queue, a light request waited 7-10 services beside 10 heavy clients.
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
    """The router at two replicas, both ready; back to one afterwards, the other gone.

    The newer pod is the one a scale-down removes (the ReplicaSet's ranking); the tests
    after this module find one router again.
    """
    before = set(router_pods(routed))
    routed.kubectl("-n", OPERATOR_NS, "scale", "deployment/llmop-router",
                   f"--replicas={ROUTERS}")
    routed.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llmop-router",
                   "--timeout=120s")
    added = [f"pod/{name}" for name in router_pods(routed) if name not in before]
    try:
        yield routed
    finally:
        routed.kubectl("-n", OPERATOR_NS, "scale", "deployment/llmop-router", "--replicas=1")
        if added:
            routed.kubectl("-n", OPERATOR_NS, "wait", "--for=delete", *added,
                           "--timeout=120s")


def router_pods(cluster: NodeCluster) -> list[str]:
    return [pod["metadata"]["name"] for pod in cluster.json(
        "-n", OPERATOR_NS, "get", "pods", "-l", "app=llmop-router")["items"]]


def answered(cluster: NodeCluster) -> dict[str, float]:
    """Each router pod's requests so far, from its own /metrics.

    Those it answered (200) and those it passed to the replica owning their model's queue.
    """
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
            if (s.name == "llmop_gateway_requests_total" and s.labels.get("status") == "200")
            or (s.name == "llmop_gateway_peer_requests_total"
                and s.labels.get("outcome") == "passed"))
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
    # fair: the request in the slot, the engine queue, then this one (~3 services); two
    # queues, one per replica: 7-10; first come, first served: the ~10 of the heavy ID
    assert statistics.median(beside) <= 5 * service, json.dumps(
        {"alone": alone, "beside": beside, "heavy answered": heavy_done})
    # both took requests: one answered them, the other passed them on
    assert all(after[pod] > before[pod] for pod in before), (before, after)
