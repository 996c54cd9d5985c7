"""MCP pushes: a serving model is registered with the MCP server, deregistered on delete."""

from __future__ import annotations

import base64
import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from llm_operator.kube import Kube
from llm_operator.mcp_server.app import McpService
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.profiles.settings import McpPush, Settings

from cluster import Cluster
from mcptools import serving
from operators import connect, running_operator
from samples import sample_doc

MODELS = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
TOKEN = "push-token"


@contextlib.asynccontextmanager
async def operator_with(cluster: Cluster, push: McpPush) -> AsyncIterator[Kube]:
    async with running_operator(connect(cluster), Settings(mcp=push)), \
            Kube(connect(cluster)) as kube:
        yield kube


async def proxying_gpt(cluster: Cluster, kube: Kube) -> None:
    """The guide's GPT-5.5 model, its gateway ready: phase Proxying."""
    await kube.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "openai-api-key"},
        "data": {"apiKey": base64.b64encode(b"sk").decode()}})
    await kube.request("POST", MODELS, body=copy.deepcopy(sample_doc("gpt55-remote")))
    await cluster.until(
        lambda: cluster.get("apps/v1", "deployments", "ai-models", "gpt55-remote") is not None)
    await kube.merge_patch("apps/v1", "deployments", "ai-models", "gpt55-remote",
                           body={"status": {"readyReplicas": 2, "replicas": 2}},
                           subresource="status")


def model(cluster: Cluster) -> dict[str, Any] | None:
    return cluster.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote")


async def test_a_serving_model_is_pushed_and_removed_on_delete(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    mcp = McpService(McpSettings(admin_token_file=token))
    async with serving(mcp) as url, operator_with(
            cluster, McpPush(admin_url=url, token_file=str(token))) as kube:
        await proxying_gpt(cluster, kube)
        await mcp.until(lambda: mcp.catalog.get("gpt55_frontier") is not None)
        pushed = mcp.catalog.get("gpt55_frontier")
        assert pushed is not None and pushed.source == "admin"
        assert pushed.endpoint == "http://gpt55-remote.ai-models.svc.cluster.local:8000/v1"
        stored = model(cluster)
        assert stored is not None and "ai.example.io/mcp-cleanup" in \
            stored["metadata"]["finalizers"]

        await kube.delete("ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote")
        await cluster.until(lambda: model(cluster) is None)
        assert mcp.catalog.get("gpt55_frontier") is None


async def test_an_unreachable_mcp_server_delays_deletion_only_boundedly(
        cluster: Cluster, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    push = McpPush(admin_url="http://127.0.0.1:9", token_file=str(token), attempts=2,
                   timeout_seconds=1)
    async with operator_with(cluster, push) as kube:
        await proxying_gpt(cluster, kube)
        await cluster.until(lambda: "ai.example.io/mcp-cleanup" in (
            (model(cluster) or {}).get("metadata", {}).get("finalizers") or []))
        await kube.delete("ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote")
        await cluster.until(lambda: model(cluster) is None, timeout=20)
    warnings = [e for e in cluster.objects_of("v1", "events", "ai-models")
                if e["reason"] == "MCPDeregistrationFailed"]
    assert len(warnings) == 1
    assert "gpt55_frontier" in warnings[0]["message"] and TOKEN not in warnings[0]["message"]
    assert warnings[0]["type"] == "Warning"
