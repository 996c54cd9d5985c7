"""Registry changes reach every connected client, of either era, within a second."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import yaml

from llm_operator.kube import Kube
from llm_operator.mcp_server.app import McpService
from llm_operator.mcp_server.run import service
from llm_operator.mcp_server.settings import McpSettings
from mcp import Client

from cluster import Cluster
from mcptools import Running, serving
from operators import connect
from samples import sample_doc

NOTIFY_WITHIN = 1.0  # seconds: the bound
API = "ai.example.io/v1alpha1"
MODELS = f"/apis/{API}/namespaces/ai-models/llmmodels"


class Watchers:
    """One legacy client (GET stream) and one 2026-07-28 client (subscriptions/listen)."""

    def __init__(self) -> None:
        self.legacy_notified = asyncio.Event()
        self.modern_notified = asyncio.Event()

    async def on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.legacy_notified.set()

    async def both(self) -> None:
        async with asyncio.timeout(NOTIFY_WITHIN):
            await asyncio.gather(self.legacy_notified.wait(), self.modern_notified.wait())


@contextlib.asynccontextmanager
async def watching(url: str, running_service: McpService) -> AsyncIterator[tuple[Watchers, Client]]:
    watchers = Watchers()
    async with Client(url, mode="legacy", message_handler=watchers.on_message) as legacy, \
            Client(url) as modern, modern.listen(tools_list_changed=True) as subscription:
        await asyncio.wait_for(running_service.broadcaster.wait_listeners(1), 5)

        async def first_event() -> None:
            async for _ in subscription:
                watchers.modern_notified.set()
                return

        task = asyncio.create_task(first_event())
        try:
            yield watchers, legacy
        finally:
            task.cancel()


async def names(client: Client) -> list[str]:
    return [t.name for t in (await client.list_tools()).tools]


async def test_a_new_yaml_file_becomes_a_tool_and_clients_hear_of_it(running: Running) -> None:
    doc = sample_doc("qwen35-9b-cpu")
    doc["metadata"]["name"] = "qwen35-9b-copy"
    doc["spec"]["mcpExposure"]["toolName"] = "qwen35_copy"
    doc["status"] = {"phase": "Ready", "endpoint": "http://127.0.0.1:9/v1"}
    async with watching(running.mcp, running.service) as (watchers, client):
        assert "qwen35_copy" not in await names(client)
        (running.models / "copy.yaml").write_text(yaml.safe_dump(doc))
        await watchers.both()
        assert "qwen35_copy" in await names(client)


async def test_editing_and_removing_files_updates_tools(running: Running) -> None:
    path = running.models / "gpt55-remote.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["mcpExposure"]["toolDescription"] = "Edited description."
    async with watching(running.mcp, running.service) as (watchers, client):
        path.write_text(yaml.safe_dump(doc))
        await watchers.both()
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert tools["gpt55_frontier"].description == "Edited description."
    async with watching(running.mcp, running.service) as (watchers, client):
        path.unlink()
        await watchers.both()
        assert "gpt55_frontier" not in await names(client)


async def test_a_bad_file_is_skipped_and_the_rest_still_serve(running: Running,
                                                             caplog: Any) -> None:
    (running.models / "broken.yaml").write_text(
        "apiVersion: ai.example.io/v1alpha1\nkind: LLMModel\nmetadata: {name: broken}\n"
        "spec: {modelId: x, deploymentMode: sideways}\n")
    (running.models / "gemini31-remote.yaml").unlink()  # a change that must still land
    await running.service.until(lambda: len(running.service.catalog) == 6)
    assert any("broken.yaml" in r.getMessage() and "deploymentMode" in r.getMessage()
               for r in caplog.records)


def llmmodel(name: str, tool: str) -> dict[str, Any]:
    doc = copy.deepcopy(sample_doc("qwen35-9b-cpu"))
    doc["metadata"] = {"name": name, "namespace": "ai-models"}
    doc["spec"]["mcpExposure"]["toolName"] = tool
    return doc


async def add(kube: Kube, name: str, tool: str, phase: str | None = "Ready") -> None:
    """Create an LLMModel, then report a phase as the operator would (status subresource)."""
    await kube.request("POST", f"{MODELS}", body=llmmodel(name, tool))
    if phase is not None:
        await set_phase(kube, name, phase)


async def set_phase(kube: Kube, name: str, phase: str) -> None:
    await kube.merge_patch(API, "llmmodels", "ai-models", name, subresource="status", body={
        "status": {"phase": phase, "endpoint": f"http://{name}.ai-models:8000/v1"}})


@contextlib.asynccontextmanager
async def in_cluster(cluster: Cluster, namespaces: list[str | None], files: Path | None = None
                     ) -> AsyncIterator[tuple[str, McpService, Kube]]:
    conn = connect(cluster)
    async with service(McpSettings(), kube=conn, namespaces=namespaces, files=files) as svc, \
            serving(svc) as url, Kube(conn) as kube:
        yield f"{url}/mcp", svc, kube


async def test_kubernetes_models_become_tools_once_serving(cluster: Cluster) -> None:
    async with in_cluster(cluster, ["ai-models"]) as (url, svc, kube):
        await add(kube, "ready-one", "ready_one")
        await add(kube, "starting", "starting_one", "Starting")
        await svc.until(lambda: len(svc.catalog) == 1)
        async with watching(url, svc) as (watchers, client):
            assert await names(client) == ["list_available_models", "ready_one"]
            await set_phase(kube, "starting", "Ready")
            await watchers.both()
            assert await names(client) == ["list_available_models", "ready_one",
                                           "starting_one"]
        async with watching(url, svc) as (watchers, client):
            await kube.delete(API, "llmmodels", "ai-models", "ready-one")
            await watchers.both()
            assert await names(client) == ["list_available_models", "starting_one"]


async def test_every_serving_model_is_known_where_it_answers_tool_or_not(
        cluster: Cluster) -> None:
    """What a guard's judge is asked at: models that are not tools count too, once they
    serve, by modelId and namespace/name; a deleted one is forgotten."""
    async with in_cluster(cluster, ["ai-models"]) as (_, svc, kube):
        judge = llmmodel("guard", "unused")
        judge["spec"]["modelId"] = "meta-llama/Llama-Guard-3-1B"
        judge["spec"]["mcpExposure"] = {"enabled": False}
        await kube.request("POST", f"{MODELS}", body=judge)
        await add(kube, "tool-one", "tool_one")  # seen after the guard, which has no phase
        await svc.until(lambda: len(svc.catalog) == 1)
        assert svc.catalog.served("ai-models/guard") is None  # not serving yet
        await set_phase(kube, "guard", "Ready")
        await svc.until(lambda: svc.catalog.served("ai-models/guard") is not None)
        found = svc.catalog.served("meta-llama/Llama-Guard-3-1B")
        assert found is not None and found.endpoint == "http://guard.ai-models:8000/v1"
        assert [r.tool_name for r in svc.catalog.tools()] == ["tool_one"]
        await kube.delete(API, "llmmodels", "ai-models", "guard")
        await svc.until(lambda: svc.catalog.served("ai-models/guard") is None)


async def test_other_namespaces_are_not_published(cluster: Cluster) -> None:
    async with in_cluster(cluster, ["ai-models"]) as (_, svc, kube):
        doc = llmmodel("elsewhere", "elsewhere_tool")
        doc["metadata"]["namespace"] = "team-b"
        await kube.request("POST", MODELS.replace("ai-models", "team-b"), body=doc)
        await add(kube, "here", "here_tool")
        await svc.until(lambda: len(svc.catalog) == 1)
        assert [r.tool_name for r in svc.catalog.tools()] == ["here_tool"]


async def test_the_watch_resumes_after_the_api_drops_it(cluster: Cluster) -> None:
    async with in_cluster(cluster, [None]) as (url, svc, kube):
        await add(kube, "first", "first_tool")
        await svc.until(lambda: len(svc.catalog) == 1)
        cluster.fail("watch", "llmmodels", 500, times=2)  # reconnecting fails twice first
        cluster.drop_watches()
        await add(kube, "second", "second_tool")
        await svc.until(lambda: len(svc.catalog) == 2, timeout=15)
        async with Client(url) as client:
            assert await names(client) == ["list_available_models", "first_tool",
                                           "second_tool"]


async def test_kubernetes_wins_over_files_for_the_same_tool(cluster: Cluster,
                                                            tmp_path: Path) -> None:
    on_disk = llmmodel("on-disk", "shared_tool")
    on_disk["spec"]["mcpExposure"]["toolDescription"] = "from a file"
    on_disk["status"] = {"phase": "Ready", "endpoint": "http://127.0.0.1:9/v1"}
    (tmp_path / "m.yaml").write_text(yaml.safe_dump(on_disk), encoding="utf-8")
    async with in_cluster(cluster, [None], files=tmp_path) as (url, svc, kube):
        assert svc.catalog.tools()[0].source == "files"
        await add(kube, "in-cluster", "shared_tool")
        await svc.until(lambda: svc.catalog.tools()[0].source == "kubernetes")
        async with Client(url) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
    assert tools["shared_tool"].description != "from a file"
