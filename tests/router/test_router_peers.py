"""Router replicas share each model's slots: each takes its share for flow control."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from test_router import routing

from llm_operator.kube import Connection, Kube

SLICES = "discovery.k8s.io/v1"


def peer_slice(ready: list[bool]) -> dict[str, Any]:
    """The router Service's EndpointSlice with one endpoint per replica."""
    return {"apiVersion": SLICES, "kind": "EndpointSlice",
            "metadata": {"name": "peers-1", "labels": {"kubernetes.io/service-name": "peers"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [{"addresses": [f"10.0.0.{i + 1}"], "conditions": {"ready": r}}
                          for i, r in enumerate(ready)]}


@pytest.mark.parametrize(("ready", "slots"), [
    ([True, True], 128), ([True, True, True], 86), ([True, False], 256), ([], 256)],
    ids=["two-replicas", "three-round-up", "one-ready", "none-counts-itself"])
async def test_each_router_replica_takes_its_share_of_a_models_slots(
        router_connection: Connection, admin: Kube, namespace: str, ready: list[bool],
        slots: int) -> None:
    await admin.request("POST", f"/api/v1/namespaces/{namespace}/services", body={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers"},
        "spec": {"ports": [{"name": "http", "port": 8080}]}})
    await admin.request("POST", f"/apis/{SLICES}/namespaces/{namespace}/endpointslices",
                        body=peer_slice(ready))
    async with routing(router_connection, admin, namespace,
                       peers=(namespace, "peers")) as cluster:
        await cluster.model("gemma", known=True)  # vLLM: 256 slots a replica
        await cluster.replica("gemma", 0)
        await cluster.upstreams("gemma", 1)
        async with asyncio.timeout(30):
            while cluster.router.gateway.flow.pools[f"{namespace}/gemma"].capacity != slots:
                cluster.router.rebuilt.clear()
                await cluster.router.rebuilt.wait()
