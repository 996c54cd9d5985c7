"""On the real node: the router queues what the model's slots cannot take, by band.

The Gemma example has one llama.cpp slot. While a long completion holds it, two batch
requests wait in the router (config/router, its settings ConfigMap); an interactive one
that comes after them waits there too, or in llama.cpp's own queue once the router has
widened the model's engine queue to one (gateway/flow/saturation.py: a look saw the slot idle
while requests waited); either way it is served first. Sent with the OpenAI SDK, its band named
by the Inference Extension's objective header. The same holds while the API server is
frozen (SIGSTOP): the router serves from what it last saw. On a full node, the queue asks
for a replica that cannot be scheduled, and the replica there serves every request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import openai
import pytest
from e2e_cluster import (
    GEMMA_ID,
    GEMMA_NAME,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    kubectl_watch,
    millicores,
)
from pace import tokens_lasting
from prometheus_client.parser import text_string_to_metric_families

from realnode import PAUSE_IMAGE

pytestmark = pytest.mark.e2e
OBJECTIVE = "x-gateway-inference-objective"


def sample(exposition: str, name: str, **labels: str) -> float | None:
    """One sample's value in a Prometheus exposition (None: absent)."""
    for family in text_string_to_metric_families(exposition):
        for found in family.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return None


async def until_load(http: aiohttp.ClientSession, url: str,
                     check: Callable[[dict[str, Any]], bool], timeout: float = 60) -> None:
    """Until the router's /scale answer for the model passes ``check``."""
    async with asyncio.timeout(timeout):
        while True:
            async with http.get(url) as r:
                if check(await r.json()):
                    return
            await asyncio.sleep(0.05)  # the router is another process: poll it


@contextlib.contextmanager
def frozen_api_server(cluster: NodeCluster) -> Iterator[None]:
    """kube-apiserver stopped (SIGSTOP: it accepts nothing, answers nothing) for the block."""
    apiserver = cluster.plane.procs["kube-apiserver"]
    apiserver.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        apiserver.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("api_server", ["running", "frozen"])
async def test_a_queued_interactive_request_is_served_before_queued_batch_ones(
        routed: NodeCluster, api_server: str) -> None:
    """Frozen: from the interactive request's arrival until every answer is in."""
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    metrics = base.removesuffix("/v1") + "/metrics"
    route = f"{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=180, max_retries=0)
    finished: list[str] = []

    async def ask(name: str, band: str, tokens: int) -> None:
        await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=tokens,
            extra_body={"ignore_eos": True}, extra_headers={OBJECTIVE: band})
        finished.append(name)

    async def counts(http: aiohttp.ClientSession) -> tuple[float, float]:
        """Interactive requests that waited, batch ones admitted, so far."""
        async with http.get(metrics) as r:
            text = await r.text()
        return (sample(text, "llmop_gateway_queue_wait_seconds_count", route=route,
                       band="interactive") or 0,
                sample(text, "llmop_gateway_flow_requests_total", route=route, band="batch",
                       outcome="admitted") or 0)

    async with client, aiohttp.ClientSession() as http:
        before = await counts(http)
        calls = [asyncio.create_task(ask("long", "standard", 160))]
        await until_load(http, scale, lambda load: load["inFlight"] == 1)
        calls += [asyncio.create_task(ask(f"batch{i}", "batch", 4)) for i in range(2)]
        await until_load(http, scale, lambda load: load["queued"] == 2)
        with frozen_api_server(routed) if api_server == "frozen" else contextlib.nullcontext():
            calls.append(asyncio.create_task(ask("interactive", "interactive", 4)))
            # it waits here, or in llama.cpp's queue behind the long one once the router
            # has widened the engine queue (gateway/flow/saturation.py): first either way
            await until_load(http, scale, lambda load: load["pending"] == 4
                             and load["queued"] >= 2)
            async with asyncio.timeout(90):
                await asyncio.gather(*calls)
        after = await counts(http)
    assert finished[:2] == ["long", "interactive"]
    assert sorted(finished[2:]) == ["batch0", "batch1"]
    assert (after[0] - before[0], after[1] - before[1]) == (1, 2)
    routed.kubectl("get", "--raw", "/readyz")  # the API server is back


async def test_requests_queued_for_a_killed_pod_are_served_by_its_replacement(
        routed: NodeCluster) -> None:
    """A full slot, two requests queued behind it, and the model's pod killed: the one in
    flight is sent again and the queued ones wait, all for the replacement pod.

    The router learns that the killed pod's connection is gone from TCP keepalive, ~30 s
    later (the pod's network went with it: no reset comes), and sends the request again.
    So the one in flight lasts about 8 s at this machine's speed: long enough to be killed
    mid-answer, short enough that sent again it leaves the interactive request in its
    band's 60 s wait (400 tokens at the 500m model's ~10 tokens a second on a slow 2-core
    machine took 40 s more, and the interactive request was refused after 60 s).
    """
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300, max_retries=0)
    before = routed.kubectl("-n", MODELS_NS, "get", "pods", "-l", f"app={GEMMA_NAME}",
                            "-o", "jsonpath={.items[*].metadata.name}").split()

    metrics = base.removesuffix("/v1") + "/metrics"

    async def ask(tokens: int, band: str) -> str:
        answer = await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=tokens,
            extra_body={"ignore_eos": True}, extra_headers={OBJECTIVE: band})
        return answer.choices[0].text

    async def upstream_errors(http: aiohttp.ClientSession) -> float:
        """The route's failed attempts so far, of every kind."""
        async with http.get(metrics) as r:
            families = text_string_to_metric_families(await r.text())
        return sum(found.value for family in families for found in family.samples
                   if found.name == "llmop_gateway_upstream_errors_total"
                   and found.labels.get("route") == f"{MODELS_NS}/{GEMMA_NAME}")

    async with client, aiohttp.ClientSession() as http:
        long = max(48, await tokens_lasting(client, 8))
        failed = await upstream_errors(http)
        calls = [asyncio.create_task(ask(long, "standard"))]
        await until_load(http, scale, lambda load: load["inFlight"] == 1)
        calls += [asyncio.create_task(ask(4, band)) for band in ("batch", "interactive")]
        # the interactive one may be in the engine queue (gateway/flow/saturation.py)
        await until_load(http, scale, lambda load: load["pending"] == 3
                         and load["queued"] >= 1)
        routed.kubectl("-n", MODELS_NS, "delete", "pods", *before, "--grace-period=0",
                       "--force", "--wait=true")
        answers = await asyncio.gather(*calls)
        failed = await upstream_errors(http) - failed
    after = routed.kubectl("-n", MODELS_NS, "get", "pods", "-l", f"app={GEMMA_NAME}",
                           "-o", "jsonpath={.items[*].metadata.name}").split()
    assert after and not set(after) & set(before)  # served by the replacement
    assert all(answers)
    # the long one was cut off by the kill and sent again, not finished before it
    assert failed >= 1, f"{long} tokens finished before the pod was killed"


def filler(millicores: int, priority_class: str) -> str:
    """A pod that only holds ``millicores`` of the node's CPU (the sandbox image, never
    pulled), at the model's own priority: the scheduler does not preempt it for the model
    (it would for a lower one)."""
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "cpu-filler", "namespace": MODELS_NS}, "spec": {
        "priorityClassName": priority_class,
        "terminationGracePeriodSeconds": 0, "containers": [{
            "name": "pause", "image": PAUSE_IMAGE, "imagePullPolicy": "Never",
            "resources": {"requests": {"cpu": f"{millicores}m"}}}]}})


def scaling(cluster: NodeCluster, most: int) -> None:
    cluster.kubectl("-n", MODELS_NS, "patch", "llmmodel", GEMMA_NAME, "--type=merge", "-p",
                    json.dumps({"spec": {"scaling": {"maxReplicas": most}}}))


POD_STATE = ("jsonpath={.metadata.name}|{.spec.nodeName}|{.status.phase}|"
             "{.status.conditions[?(@.type==\"PodScheduled\")].reason}|"
             "{.status.conditions[?(@.type==\"PodScheduled\")].message}{\"\\n\"}")


def pod_states(lines: list[str]) -> list[tuple[str, str, str, str, str]]:
    """The watch's lines as (pod, node, phase, PodScheduled reason, its message)."""
    return [(f[0], f[1], f[2], f[3], f[4]) for line in lines
            if len(f := line.split("|", 4)) == 5]


def unplaceable(lines: list[str]) -> bool:
    return any(reason == "Unschedulable" and "Insufficient cpu" in message
               for _, _, _, reason, message in pod_states(lines))


async def test_a_queue_whose_scale_up_cannot_be_placed_is_served_by_the_replica_there(
        routed: NodeCluster) -> None:
    """Observed while it holds (a watch on the model's pods through the whole window): the
    queue asks for a second replica, the scheduler finds no room for it ("Insufficient
    cpu"), and the one replica there serves all 8 requests.

    Once the queue drains, the autoscaler scales back to one replica after its
    stabilization window (15 s on the test node) and the unplaced pod is deleted: on a
    slow machine that happens before the last answer, so the pod cannot be looked up
    afterwards (the check this replaces failed so, 3 times of 3, on a new 2-core machine).

    The 8 answers together last about 20 s at this machine's speed: the autoscaler asks
    within a second of the queue, and 8 x 96 tokens spent ~90 s of a slow machine's time
    after the scheduler had refused.
    """
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300, max_retries=0)
    pods = routed.json("-n", MODELS_NS, "get", "pods", "-l", f"app={GEMMA_NAME}")["items"]
    if going := [p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")]:
        routed.kubectl("-n", MODELS_NS, "wait", "--for=delete", "--timeout=60s",
                       *(f"pod/{name}" for name in going))  # its CPU is free once it is gone
    (serving,) = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    priority = serving["spec"]["priorityClassName"]  # the model's, as every replica's
    each = max(16, await tokens_lasting(client, 20) // 8)  # timed before the filler is there
    routed.kubectl("apply", "-f", "-", stdin=filler(max(1, routed.free_cpu() - 100),
                                                    priority))

    async def ask() -> str:
        answer = await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=each,
            extra_body={"ignore_eos": True})
        return answer.choices[0].text

    try:
        # the precondition: the filler holds the node's free CPU (else a second replica
        # would fit, and the test would prove nothing)
        routed.kubectl("-n", MODELS_NS, "wait", "pod/cpu-filler", "--timeout=60s",
                       "--for=condition=PodScheduled")
        need = sum(millicores(c["resources"]["requests"]["cpu"])
                   for c in serving["spec"]["containers"])
        assert routed.free_cpu() < need, f"the filler left room for a replica ({need}m)"
        with kubectl_watch(routed.plane, "-n", MODELS_NS, "get", "pods", "-l",
                           f"app={GEMMA_NAME}", "--watch", "-o", POD_STATE) as watch:
            scaling(routed, 2)
            async with client, aiohttp.ClientSession() as http:
                calls = [asyncio.create_task(ask()) for _ in range(8)]
                await until_load(http, scale, lambda load: load["queued"] >= 4)
                # the autoscaler asks for a second replica; the scheduler cannot place it
                await asyncio.to_thread(watch.until, unplaceable, 120)
                async with asyncio.timeout(240):
                    answers = await asyncio.gather(*calls)
            seen = list(watch.lines)
    finally:
        scaling(routed, 1)
        routed.kubectl("-n", MODELS_NS, "delete", "pod", "cpu-filler", "--wait=false",
                       "--ignore-not-found")
    assert len(answers) == 8 and all(answers)
    states = pod_states(seen)
    placed = {pod for pod, node, *_ in states if node}
    assert placed == {serving["metadata"]["name"]}, seen  # all served by the one replica
    assert unplaceable(seen), seen
