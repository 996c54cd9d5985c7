"""The router reads InferenceObjectives: the objective header selects a band by priority."""

from __future__ import annotations

import asyncio
from pathlib import Path

import openai
import pytest
from test_router import MODEL_ID, routing

from llm_operator.kube import Connection, Kube

from controlplane import ControlPlane

CRD = Path(__file__).parent / "fixtures" / "inferenceobjectives-crd.yaml"
GROUP = "inference.networking.x-k8s.io/v1alpha2"


@pytest.fixture(scope="session")
def objectives_crd(apiserver: ControlPlane) -> None:
    apiserver.kubectl("apply", "-f", str(CRD))
    apiserver.kubectl("wait", "--for=condition=Established", "--timeout=60s",
                      "crd/inferenceobjectives.inference.networking.x-k8s.io")


async def objective(kube: Kube, namespace: str, name: str, priority: int | None) -> None:
    spec: dict[str, object] = {"poolRef": {"name": "gemma"}}
    if priority is not None:
        spec["priority"] = priority
    await kube.request("POST", f"/apis/{GROUP}/namespaces/{namespace}/inferenceobjectives",
                       body={"apiVersion": GROUP, "kind": "InferenceObjective",
                             "metadata": {"name": name}, "spec": spec})


async def test_an_inference_objectives_priority_chooses_the_band(
        objectives_crd: None, router_connection: Connection, admin: Kube,
        namespace: str) -> None:
    await objective(admin, namespace, "premium", 150)
    await objective(admin, namespace, "background", None)
    async with routing(router_connection, admin, namespace) as cluster:
        async with asyncio.timeout(30):
            while cluster.router.gateway.objectives != {"premium": 150, "background": 0}:
                cluster.router.rebuilt.clear()
                await cluster.router.rebuilt.wait()
        await cluster.model("gemma", known=True)
        await cluster.replica("gemma", 0)
        await cluster.upstreams("gemma", 1)
        sdk = openai.AsyncOpenAI(base_url=f"{cluster.url}/v1", api_key="unused",
                                 max_retries=0)
        async with sdk:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "hi"}],
                extra_headers={"x-gateway-inference-objective": "premium"})
        registry = cluster.router.gateway.metrics.registry
        admitted = registry.get_sample_value("llmop_gateway_flow_requests_total", {
            "route": f"{namespace}/gemma", "band": "interactive", "outcome": "admitted"})
    assert admitted == 1
