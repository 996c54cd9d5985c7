"""The operator's API client against the emulator: apply, list, delete, patch, retries."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from llm_operator.kube import ApiError, Connection, Kube, from_kubeconfig, path_of

from cluster import Cluster


@pytest.fixture
async def kube() -> AsyncIterator[Cluster]:
    async with Cluster() as cluster, kmock.Server(cluster):
        cluster.register("v1", "configmaps", "ConfigMap")
        cluster.register("ai.example.io/v1alpha1", "llmmodels", "LLMModel", status=True)
        yield cluster


@pytest.fixture
async def client(kube: Cluster) -> AsyncIterator[Kube]:
    slept: list[float] = []

    async def no_sleep(seconds: float) -> None:
        slept.append(seconds)

    async with Kube(Connection(server=str(kube.url).rstrip("/")), sleep=no_sleep) as k:
        yield k


def configmap(name: str, data: dict[str, str], **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ai-models", "labels": labels},
            "data": data}


async def test_apply_creates_then_updates_then_is_a_no_op(kube: Cluster, client: Kube) -> None:
    created = await client.apply(configmap("c", {"a": "1"}))
    updated = await client.apply(configmap("c", {"a": "2"}))
    assert updated["data"] == {"a": "2"}
    revision = kube.revision
    await client.apply(configmap("c", {"a": "2"}))
    assert kube.revision == revision  # unchanged desired state: no change server-side
    assert created["metadata"]["uid"] == updated["metadata"]["uid"]


async def test_list_by_selector_get_and_delete(client: Kube) -> None:
    await client.apply(configmap("mine", {}, owner="m"))
    await client.apply(configmap("other", {}, owner="x"))
    mine = await client.list("v1", "configmaps", "ai-models", "owner=m")
    assert [o["metadata"]["name"] for o in mine] == ["mine"]
    assert await client.delete("v1", "configmaps", "ai-models", "mine") is True
    assert await client.delete("v1", "configmaps", "ai-models", "mine") is False
    assert await client.get("v1", "configmaps", "ai-models", "mine") is None


async def test_status_patch_goes_to_the_subresource(kube: Cluster, client: Kube) -> None:
    kube.store[("ai.example.io/v1alpha1/llmmodels", "ai-models", "m")] = {
        "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
        "metadata": {"name": "m", "namespace": "ai-models", "uid": "u", "generation": 1,
                     "resourceVersion": "1", "creationTimestamp": "t"}, "spec": {}}
    patched = await client.merge_patch("ai.example.io/v1alpha1", "llmmodels", "ai-models", "m",
                                       body={"status": {"phase": "Ready"}}, subresource="status")
    assert patched["status"] == {"phase": "Ready"}


async def test_server_errors_are_retried_then_surface(kube: Cluster, client: Kube) -> None:
    kube.fail("list", "configmaps", 503, times=2)
    assert await client.list("v1", "configmaps", "ai-models") == []
    kube.fail("list", "configmaps", 500, times=10)
    with pytest.raises(ApiError) as caught:
        await client.list("v1", "configmaps", "ai-models")
    assert caught.value.status == 500


async def test_conflicts_are_not_retried(kube: Cluster, client: Kube) -> None:
    kube.fail("create", "configmaps", 409, times=1)
    with pytest.raises(ApiError, match="409"):
        await client.request("POST", path_of("v1", "configmaps", "ai-models"),
                             body=configmap("x", {}))


def test_kubeconfig_with_inline_credentials(tmp_path: Path) -> None:
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    (tmp_path / "config").write_text(yaml.safe_dump({
        "current-context": "prod",
        "clusters": [{"name": "c", "cluster": {"server": "https://k8s.example.com:6443/",
                                               "certificate-authority-data": ca}}],
        "users": [{"name": "u", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "prod", "context": {"cluster": "c", "user": "u"}}]}))
    conn = from_kubeconfig(str(tmp_path / "config"))
    assert (conn.server, conn.token) == ("https://k8s.example.com:6443", "t0ken")
    assert conn.ca_file and Path(conn.ca_file).read_bytes().startswith(b"-----BEGIN")
    assert oct(Path(conn.ca_file).stat().st_mode)[-3:] == "600"
    again = from_kubeconfig(str(tmp_path / "config"))
    assert again.ca_file == conn.ca_file  # one file per content, not one per load


def test_exec_credentials_are_refused_clearly(tmp_path: Path) -> None:
    (tmp_path / "config").write_text(yaml.safe_dump({
        "current-context": "x", "clusters": [{"name": "c", "cluster": {"server": "https://a"}}],
        "users": [{"name": "u", "user": {"exec": {"command": "aws"}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    with pytest.raises(ValueError, match="exec and auth-provider"):
        from_kubeconfig(str(tmp_path / "config"))


@pytest.mark.parametrize(("args", "path"), [
    (("v1", "pods", "ns", None), "/api/v1/namespaces/ns/pods"),
    (("apps/v1", "deployments", "ns", "d"), "/apis/apps/v1/namespaces/ns/deployments/d"),
    (("ai.example.io/v1alpha1", "llmmodels", None, None), "/apis/ai.example.io/v1alpha1/llmmodels"),
])
def test_paths(args: tuple[Any, ...], path: str) -> None:
    assert path_of(*args) == path
