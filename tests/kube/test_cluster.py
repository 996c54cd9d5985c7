"""The emulator behaves like a Kubernetes API server where the operator depends on it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import yaml

from cluster import Cluster

MODELS = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
DEPLOYS = "/apis/apps/v1/namespaces/ai-models/deployments"
CONFIGMAPS = "/api/v1/namespaces/ai-models/configmaps"
MERGE = {"Content-Type": "application/merge-patch+json"}
APPLY = {"Content-Type": "application/apply-patch+yaml"}


@pytest.fixture
async def http(kube: Cluster) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(base_url=str(kube.url)) as session:
        yield session


def model(name: str = "m", **labels: str) -> dict[str, Any]:
    return {"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
            "metadata": {"name": name, "labels": labels},
            "spec": {"modelId": "a/b"}, "status": {"phase": "Ready"}}


async def send(http: aiohttp.ClientSession, method: str, url: str, body: Any = None,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = yaml.safe_dump(body) if headers == APPLY else json.dumps(body) if body else None
    async with http.request(method, url, data=data, headers=headers or
                            {"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json(content_type=None)


async def test_create_assigns_identity_and_ignores_status(http: aiohttp.ClientSession) -> None:
    status, obj = await send(http, "POST", MODELS, model())
    assert status == 201
    meta = obj["metadata"]
    assert meta["uid"] and meta["resourceVersion"] and meta["generation"] == 1
    assert meta["namespace"] == "ai-models" and "status" not in obj
    again, error = await send(http, "POST", MODELS, model())
    assert again == 409 and error["reason"] == "AlreadyExists"


async def test_generation_moves_with_spec_only(http: aiohttp.ClientSession) -> None:
    _, created = await send(http, "POST", MODELS, model())
    _, labelled = await send(http, "PATCH", f"{MODELS}/m", {"metadata": {"labels": {"a": "b"}}},
                             MERGE)
    _, respec = await send(http, "PATCH", f"{MODELS}/m", {"spec": {"modelId": "c/d"}}, MERGE)
    assert labelled["metadata"]["generation"] == 1 and respec["metadata"]["generation"] == 2
    assert int(respec["metadata"]["resourceVersion"]) > int(
        labelled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


async def test_status_subresource_is_separate(http: aiohttp.ClientSession) -> None:
    await send(http, "POST", MODELS, model())
    _, main = await send(http, "PATCH", f"{MODELS}/m", {"status": {"phase": "Ready"}}, MERGE)
    assert "status" not in main
    _, sub = await send(http, "PATCH", f"{MODELS}/m/status",
                        {"status": {"phase": "Ready"}, "spec": {"modelId": "x/y"}}, MERGE)
    assert sub["status"] == {"phase": "Ready"} and sub["spec"]["modelId"] == "a/b"
    assert sub["metadata"]["generation"] == 1


async def test_stale_resource_version_is_a_conflict(http: aiohttp.ClientSession) -> None:
    _, created = await send(http, "POST", MODELS, model())
    stale = created["metadata"]["resourceVersion"]
    await send(http, "PATCH", f"{MODELS}/m", {"spec": {"modelId": "c/d"}}, MERGE)
    status, error = await send(http, "PATCH", f"{MODELS}/m",
                               {"metadata": {"resourceVersion": stale}, "spec": {}}, MERGE)
    assert status == 409 and error["reason"] == "Conflict"


async def test_no_op_writes_change_nothing(kube: Cluster, http: aiohttp.ClientSession) -> None:
    _, created = await send(http, "POST", MODELS, model(team="ml"))
    before = kube.revision
    _, same = await send(http, "PATCH", f"{MODELS}/m", {"metadata": {"labels": {"team": "ml"}}},
                         MERGE)
    assert kube.revision == before
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_server_side_apply_creates_merges_and_prunes(
        kube: Cluster, http: aiohttp.ClientSession) -> None:
    url = f"{CONFIGMAPS}/cfg?fieldManager=llm-operator&force=true"
    first = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
             "data": {"a": "1", "b": "2"}}
    status, created = await send(http, "PATCH", url, first, APPLY)
    assert status == 200 and created["data"] == {"a": "1", "b": "2"}
    await send(http, "PATCH", f"{CONFIGMAPS}/cfg", {"data": {"mine": "x"}}, MERGE)  # another writer
    second = {**first, "data": {"a": "1"}}
    _, applied = await send(http, "PATCH", url, second, APPLY)
    assert applied["data"] == {"a": "1", "mine": "x"}  # b dropped by its manager; mine kept
    rv = kube.revision
    await send(http, "PATCH", url, second, APPLY)
    assert kube.revision == rv  # re-applying the same config writes nothing


async def test_patch_kinds_and_put(http: aiohttp.ClientSession) -> None:
    await send(http, "POST", CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"x": "1"}})
    _, jp = await send(http, "PATCH", f"{CONFIGMAPS}/c", [{"op": "add", "path": "/data/y",
                                                           "value": "2"}],
                       {"Content-Type": "application/json-patch+json"})
    assert jp["data"] == {"x": "1", "y": "2"}
    _, put = await send(http, "PUT", f"{CONFIGMAPS}/c", {"metadata": {"name": "c"},
                                                          "data": {"z": "3"}})
    assert put["data"] == {"z": "3"}


@pytest.mark.parametrize(("selector", "names"), [
    ("tier=gpu", ["a"]), ("tier!=gpu", ["b", "c"]), ("tier in (gpu,cpu)", ["a", "b"]),
    ("tier notin (gpu)", ["b", "c"]), ("tier", ["a", "b"]), ("!tier", ["c"]),
    ("tier=gpu,team=ml", ["a"]), ("", ["a", "b", "c"]),
])
async def test_label_selectors(http: aiohttp.ClientSession, selector: str,
                               names: list[str]) -> None:
    for name, labels in (("a", {"tier": "gpu", "team": "ml"}), ("b", {"tier": "cpu"}),
                         ("c", {})):
        await send(http, "POST", MODELS, model(name, **labels))
    async with http.get(MODELS, params={"labelSelector": selector}) as resp:
        body = await resp.json()
    assert [o["metadata"]["name"] for o in body["items"]] == names
    assert body["kind"] == "LLMModelList" and body["metadata"]["resourceVersion"]


async def test_finalizers_delay_deletion(kube: Cluster, http: aiohttp.ClientSession) -> None:
    doc = model()
    doc["metadata"]["finalizers"] = ["ai.example.io/mcp-cleanup"]
    await send(http, "POST", MODELS, doc)
    _, marked = await send(http, "DELETE", f"{MODELS}/m")
    assert marked["metadata"]["deletionTimestamp"]
    assert kube.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", "m") is not None
    await send(http, "PATCH", f"{MODELS}/m", {"metadata": {"finalizers": None}}, MERGE)
    assert kube.get("ai.example.io/v1alpha1", "llmmodels", "ai-models", "m") is None


async def test_owned_children_are_garbage_collected(kube: Cluster,
                                                    http: aiohttp.ClientSession) -> None:
    _, owner = await send(http, "POST", MODELS, model())
    ref = {"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel", "name": "m",
           "uid": owner["metadata"]["uid"], "controller": True}
    await send(http, "POST", DEPLOYS, {"metadata": {"name": "m", "ownerReferences": [ref]},
                                       "spec": {}})
    await send(http, "POST", DEPLOYS, {"metadata": {"name": "unowned"}, "spec": {}})
    await send(http, "DELETE", f"{MODELS}/m")
    assert [d["metadata"]["name"] for d in kube.objects_of("apps/v1", "deployments")] == [
        "unowned"]


async def test_watch_streams_changes_and_resumes(http: aiohttp.ClientSession) -> None:
    _, created = await send(http, "POST", MODELS, model("a"))
    rv = created["metadata"]["resourceVersion"]
    await send(http, "POST", MODELS, model("b", tier="gpu"))
    params = {"watch": "true", "resourceVersion": rv, "timeoutSeconds": "5"}
    async with http.get(MODELS, params=params) as resp:
        first = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
        assert (first["type"], first["object"]["metadata"]["name"]) == ("ADDED", "b")
        await send(http, "PATCH", f"{MODELS}/a", {"spec": {"modelId": "x/y"}}, MERGE)
        second = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
        assert (second["type"], second["object"]["metadata"]["name"]) == ("MODIFIED", "a")
    selected = {"watch": "true", "labelSelector": "tier=gpu", "timeoutSeconds": "1"}
    async with http.get(MODELS, params=selected) as resp:
        lines = [json.loads(x) for x in (await resp.read()).splitlines() if x]
    assert [e["object"]["metadata"]["name"] for e in lines] == ["b"]


async def test_injected_faults(kube: Cluster, http: aiohttp.ClientSession) -> None:
    kube.fail("create", "llmmodels", 500, times=1)
    failed, _ = await send(http, "POST", MODELS, model())
    ok, _ = await send(http, "POST", MODELS, model())
    assert (failed, ok) == (500, 201)
