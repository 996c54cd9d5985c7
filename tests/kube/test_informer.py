"""The watch cache: list then watch, our own writes taken once, absent kinds, faults."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_operator.informer import Informer
from llm_operator.kube import Kube

from cluster import Cluster
from operators import connect

Change = tuple[str, str]  # (event type, name)


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "labels": {"owner": "us"}},
            "data": data}


@contextlib.asynccontextmanager
async def watching(kube: Kube, **options: Any
                   ) -> AsyncIterator[tuple[Informer, asyncio.Queue[Change]]]:
    changes: asyncio.Queue[Change] = asyncio.Queue()
    informer = Informer(kube, "v1", "configmaps", "ns", on_change=lambda kind, obj, _: (
        changes.put_nowait((kind, obj["metadata"]["name"]))), **options)
    task = asyncio.create_task(informer.run())
    await asyncio.wait_for(informer.synced.wait(), 5)
    try:
        yield informer, changes
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    async with Kube(connect(cluster)) as client:
        yield client


async def next_change(changes: asyncio.Queue[Change]) -> Change:
    return await asyncio.wait_for(changes.get(), 5)


async def test_lists_then_follows_changes_by_label(kube: Kube) -> None:
    await kube.apply(config_map("before"))
    await kube.apply({**config_map("other"), "metadata": {"name": "other", "namespace": "ns"}})
    async with watching(kube, label_selector="owner=us") as (informer, changes):
        assert await next_change(changes) == ("ADDED", "before")
        await kube.apply(config_map("after"))
        assert await next_change(changes) == ("ADDED", "after")
        await kube.delete("v1", "configmaps", "ns", "before")
        assert await next_change(changes) == ("DELETED", "before")
        assert sorted(n for _, n in informer.objects) == ["after"]
        assert [o["metadata"]["name"] for o in informer.select("ns", {"owner": "us"})] \
            == ["after"]


async def test_the_label_index_follows_relabels_and_deletes(kube: Kube) -> None:
    async with watching(kube, index_label="owner") as (informer, _):
        informer.store(await kube.apply(config_map("a")))
        informer.store(await kube.apply({**config_map("b"), "metadata": {
            "name": "b", "namespace": "ns", "labels": {"owner": "them"}}}))
        assert [o["metadata"]["name"] for o in informer.select("ns", {"owner": "us"})] == ["a"]
        informer.store(await kube.apply({**config_map("a"), "metadata": {
            "name": "a", "namespace": "ns", "labels": {"owner": "them"}}}))
        assert informer.select("ns", {"owner": "us"}) == []
        assert sorted(o["metadata"]["name"] for o in informer.select(
            "ns", {"owner": "them"})) == ["a", "b"]
        informer.forget("ns", "b")
        assert [o["metadata"]["name"] for o in informer.select(
            "ns", {"owner": "them"})] == ["a"]
        assert informer.select("elsewhere", {"owner": "them"}) == []


async def test_a_write_stored_at_once_is_not_announced_again_by_its_watch_event(
        kube: Kube) -> None:
    async with watching(kube) as (informer, changes):
        informer.store(await kube.apply(config_map("mine", a="1")))
        assert informer.get("ns", "mine") is not None  # readable before the event arrives
        await kube.apply(config_map("marker"))  # events arrive in order: "mine" came first
        assert await next_change(changes) == ("ADDED", "marker")
        assert changes.empty()


async def test_an_older_version_never_replaces_a_newer_one(kube: Kube) -> None:
    async with watching(kube) as (informer, _):
        old = await kube.apply(config_map("cm", a="1"))
        new = await kube.apply(config_map("cm", a="2"))
        informer.store(new)
        informer.store(old)
        assert informer.get("ns", "cm") == new


async def test_a_kind_the_server_does_not_serve_is_synced_empty_and_absent(kube: Kube) -> None:
    informer = Informer(kube, "example.com/v1", "widgets", "ns", absent_retry=3600)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        assert informer.absent and informer.objects == {}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def lists(cluster: Cluster) -> int:
    return sum(1 for r in cluster if r.method.value == "GET" and "watch" not in r.url.query
               and r.url.path.endswith("/configmaps"))


@pytest.mark.parametrize(("status", "relists"), [(500, 0), (410, 1)])
async def test_a_failed_watch_resumes_and_a_gone_version_relists(
        cluster: Cluster, kube: Kube, status: int, relists: int) -> None:
    async def no_wait(_: float) -> None:
        return None

    cluster.fail("watch", "configmaps", status)
    async with watching(kube, sleep=no_wait) as (informer, changes):
        await kube.apply(config_map("after"))
        assert await next_change(changes) == ("ADDED", "after")
        assert informer.get("ns", "after") is not None
    assert lists(cluster) == 1 + relists
