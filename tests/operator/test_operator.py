"""The kopf operator end to end against the emulator: a model in, children and status out."""

from __future__ import annotations

import base64
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from llm_operator.kube import Kube
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.profiles.settings import Settings

from cluster import Cluster, allowed, needed
from operators import connect, running_operator
from samples import REPO, sample_doc


@pytest.fixture
async def operator(cluster: Cluster) -> AsyncIterator[Kube]:
    async with running_operator(connect(cluster)), \
            Kube(connect(cluster)) as client:
        yield client


async def test_a_created_model_gets_children_then_status_from_its_pods(
        cluster: Cluster, operator: Kube) -> None:
    await operator.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai-api-key"},
        "data": {"apiKey": base64.b64encode(b"sk").decode()}})
    doc: dict[str, Any] = copy.deepcopy(sample_doc("gpt55-remote"))
    await operator.request("POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
                           body=doc)

    await cluster.until(
        lambda: cluster.get("apps/v1", "deployments", "ai-models", "gpt55-remote") is not None)
    await operator.merge_patch("apps/v1", "deployments", "ai-models", "gpt55-remote",
                               body={"status": {"readyReplicas": 2, "replicas": 2}},
                               subresource="status")

    def proxying() -> bool:
        model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote")
        return bool(model and model.get("status", {}).get("phase") == "Proxying")

    await cluster.until(proxying)
    model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote")
    assert model is not None
    assert model["metadata"]["labels"]["ai.example.io/deployment-mode"] == "remote"


def writes(cluster: Cluster) -> list[str]:
    return [f"{r.method.value} {r.url.path}" for r in cluster
            if r.method.value not in {"GET"} and r.resource is not None]


async def test_a_restart_with_nothing_changed_writes_nothing(cluster: Cluster) -> None:
    async with Kube(connect(cluster)) as client:
        await client.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
            "data": {"token": base64.b64encode(b"hf").decode()}})
        await client.request(
            "POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
            body=copy.deepcopy(sample_doc("gemma4-31b-nvidia")))
    deploy = ("apps/v1", "deployments", "ai-models", "gemma4-31b-nvidia")

    metrics = OperatorMetrics()

    def reconciled() -> bool:
        model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models",
                            "gemma4-31b-nvidia")
        handled = (model or {}).get("metadata", {}).get("annotations", {})
        return (cluster.get(*deploy) is not None and bool(model and model.get("status"))
                and "operator.ai.example.io/last-handled-configuration" in handled)

    async with running_operator(connect(cluster), metrics=metrics):
        await cluster.until(reconciled)
    phase = metrics.registry.get_sample_value(
        "llmop_operator_model_phase",
        {"model_namespace": "ai-models", "name": "gemma4-31b-nvidia", "phase": "Pending"})
    assert phase == 1.0
    assert (metrics.registry.get_sample_value("llmop_operator_reconciles_total",
                                              {"result": "ok"}) or 0) >= 1
    assert metrics.registry.get_sample_value("llmop_operator_reconcile_queue_depth") == 0
    assert metrics.registry.get_sample_value("llmop_operator_reconciles_in_flight") == 0
    # Each child was applied once, although the Deployment's own events also triggered
    # reconciles while the first one ran (they wait for it, then find nothing to do).
    applied = [w.rsplit("/", 1)[0].rsplit("/", 1)[1] for w in writes(cluster)
               if w.startswith("PATCH") and w.endswith("/gemma4-31b-nvidia")
               and "/llmmodels/" not in w]
    assert sorted(applied) == ["deployments", "scaledobjects", "servicemonitors", "services"]
    before = len(writes(cluster))
    reads_before = sum(1 for _ in cluster)

    def observed_again() -> bool:  # the restarted operator has read the model's children
        return any(r.url.path.endswith("/deployments/gemma4-31b-nvidia")
                   for r in list(cluster)[reads_before:])

    async with running_operator(connect(cluster)):
        await cluster.until(observed_again)
    assert writes(cluster)[before:] == []


async def test_rbac_allows_every_request_the_operator_makes(cluster: Cluster) -> None:
    """Run a model through create, status and a change; every call must be permitted."""
    rules = yaml.safe_load((REPO / "config/rbac/role.yaml").read_text())["rules"]
    async with Kube(connect(cluster)) as client:
        await client.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
            "data": {"token": base64.b64encode(b"hf").decode()}})
        async with running_operator(connect(cluster)):
            await client.request(
                "POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
                body=copy.deepcopy(sample_doc("gemma4-31b-nvidia")))
            await cluster.until(lambda: cluster.get(
                "keda.sh/v1alpha1", "scaledobjects", "ai-models", "gemma4-31b-nvidia") is not None)
            await client.merge_patch(
                "ai.example.io/v1alpha1", "llmmodels", "ai-models", "gemma4-31b-nvidia",
                body={"spec": {"scaling": {"minReplicas": 1, "maxReplicas": 1}}})
            await cluster.until(lambda: cluster.get(
                "keda.sh/v1alpha1", "scaledobjects", "ai-models", "gemma4-31b-nvidia") is None)
    used = {n for n in needed(cluster)
            if not (n[1] == "llmmodels" and n[2] == "create")}  # the test created the model
    used -= {("", "secrets", "create")}  # the test's own setup
    missing = sorted(n for n in used if not allowed(rules, *n))
    assert missing == []
    assert ("", "secrets", "get") in used and ("", "secrets", "list") not in used


async def test_status_carries_prometheus_metrics_when_enabled(cluster: Cluster) -> None:
    """Prometheus's HTTP API (fake, on loopback) answers the status queries."""
    asked: list[str] = []

    async def query(request: web.Request) -> web.Response:
        promql = request.query["query"]
        asked.append(promql)
        value = "120" if promql.endswith("* 60") else "850"
        return web.json_response({"status": "success", "data": {
            "resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    settings = Settings.model_validate({"statusMetrics": True,
                                        "prometheusAddress": str(server.make_url("/"))})
    try:
        async with Kube(connect(cluster)) as client:
            await client.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
                "data": {"token": base64.b64encode(b"hf").decode()}})
            async with running_operator(connect(cluster), settings):
                await client.request(
                    "POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
                    body=copy.deepcopy(sample_doc("gemma4-31b-nvidia")))

                def measured() -> bool:
                    model = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models",
                                        "gemma4-31b-nvidia")
                    return bool(model and model.get("status", {}).get("requestsPerMinute"))

                await cluster.until(measured)
    finally:
        await server.close()
    status = cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models",
                         "gemma4-31b-nvidia")["status"]  # type: ignore[index]
    assert (status["requestsPerMinute"], status["averageLatencyMs"]) == (120, 850)
    assert any("vllm:e2e_request_latency_seconds_count" in q for q in asked)
