"""On the real node: the router queues what the model's slots cannot take, by band.

The Gemma example has one llama.cpp slot. While a long completion holds it, two batch
requests and then an interactive one wait in the router (config/router, its settings
ConfigMap); the interactive one is served first. Sent with the OpenAI SDK, its band named
by the Inference Extension's objective header. The same holds while the API server is
frozen (SIGSTOP): the router serves from what it last saw.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import openai
import pytest
from e2e_cluster import GEMMA_ID, GEMMA_NAME, MODELS_NS, OPERATOR_NS, NodeCluster
from prometheus_client.parser import text_string_to_metric_families

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


async def test_a_queued_interactive_request_is_served_before_queued_batch_ones(
        routed: NodeCluster) -> None:
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=180, max_retries=0)
    finished: list[str] = []

    async def ask(name: str, band: str, tokens: int) -> None:
        await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=tokens,
            extra_body={"ignore_eos": True}, extra_headers={OBJECTIVE: band})
        finished.append(name)

    async with client, aiohttp.ClientSession() as http:
        calls = [asyncio.create_task(ask("long", "standard", 160))]
        await until_load(http, scale, lambda load: load["inFlight"] == 1)
        calls += [asyncio.create_task(ask(f"batch{i}", "batch", 4)) for i in range(2)]
        await until_load(http, scale, lambda load: load["queued"] == 2)
        calls.append(asyncio.create_task(ask("interactive", "interactive", 4)))
        await until_load(http, scale, lambda load: load["queued"] == 3
                         and load["pending"] == 4)
        await asyncio.gather(*calls)
        async with http.get(base.removesuffix("/v1") + "/metrics") as r:
            metrics = await r.text()
    assert finished[:2] == ["long", "interactive"]
    assert sorted(finished[2:]) == ["batch0", "batch1"]
    route = f"{MODELS_NS}/{GEMMA_NAME}"
    assert sample(metrics, "llmop_gateway_queue_wait_seconds_count",
                  route=route, band="interactive") == 1
    assert sample(metrics, "llmop_gateway_flow_requests_total",
                  route=route, band="batch", outcome="admitted") == 2


@contextlib.contextmanager
def frozen_api_server(cluster: NodeCluster) -> Iterator[None]:
    """kube-apiserver stopped (SIGSTOP: it accepts nothing, answers nothing) for the block."""
    apiserver = cluster.plane.procs["kube-apiserver"]
    apiserver.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        apiserver.send_signal(signal.SIGCONT)


async def test_queued_requests_are_served_by_band_while_the_api_server_is_frozen(
        routed: NodeCluster) -> None:
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=120, max_retries=0)
    finished: list[str] = []

    async def ask(name: str, band: str, tokens: int) -> None:
        await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=tokens,
            extra_body={"ignore_eos": True}, extra_headers={OBJECTIVE: band})
        finished.append(name)

    async with client, aiohttp.ClientSession() as http:
        calls = [asyncio.create_task(ask("long", "standard", 160))]
        await until_load(http, scale, lambda load: load["inFlight"] == 1)
        calls += [asyncio.create_task(ask(f"batch{i}", "batch", 4)) for i in range(2)]
        await until_load(http, scale, lambda load: load["queued"] == 2)
        with frozen_api_server(routed):
            calls.append(asyncio.create_task(ask("interactive", "interactive", 4)))
            await until_load(http, scale, lambda load: load["queued"] == 3)
            async with asyncio.timeout(90):
                await asyncio.gather(*calls)
    assert finished[:2] == ["long", "interactive"]
    assert sorted(finished[2:]) == ["batch0", "batch1"]
    routed.kubectl("get", "--raw", "/readyz")  # and the API server is back


async def test_requests_queued_for_a_killed_pod_are_served_by_its_replacement(
        routed: NodeCluster) -> None:
    """A full slot, two requests queued behind it, and the model's pod killed: the one in
    flight is sent again and the queued ones wait, all for the replacement pod."""
    base = routed.service_url(OPERATOR_NS, "llmop-router", 8080)
    scale = base.removesuffix("/v1") + f"/scale/{MODELS_NS}/{GEMMA_NAME}"
    client = openai.AsyncOpenAI(base_url=base, api_key="unused", timeout=300, max_retries=0)
    before = routed.kubectl("-n", MODELS_NS, "get", "pods", "-l", f"app={GEMMA_NAME}",
                            "-o", "jsonpath={.items[*].metadata.name}").split()

    async def ask(tokens: int, band: str) -> str:
        answer = await client.completions.create(
            model=GEMMA_ID, prompt="Once upon a time", max_tokens=tokens,
            extra_body={"ignore_eos": True}, extra_headers={OBJECTIVE: band})
        return answer.choices[0].text

    async with client, aiohttp.ClientSession() as http:
        calls = [asyncio.create_task(ask(400, "standard"))]
        await until_load(http, scale, lambda load: load["inFlight"] == 1)
        calls += [asyncio.create_task(ask(4, band)) for band in ("batch", "interactive")]
        await until_load(http, scale, lambda load: load["queued"] == 2)
        routed.kubectl("-n", MODELS_NS, "delete", "pods", *before, "--grace-period=0",
                       "--force", "--wait=true")
        answers = await asyncio.gather(*calls)
    after = routed.kubectl("-n", MODELS_NS, "get", "pods", "-l", f"app={GEMMA_NAME}",
                           "-o", "jsonpath={.items[*].metadata.name}").split()
    assert after and not set(after) & set(before)  # served by the replacement
    assert all(answers)
