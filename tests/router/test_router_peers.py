"""Router replicas on the real API server: each model's requests wait on the one owning it.

Two routers, each found by the other in their Service's EndpointSlices (one slice each:
they listen on one address, on two ports), as the Deployment's replicas find each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from test_router import CHAT, MODEL_ID, Cluster

from llm_operator.kube import Connection, Kube
from llm_operator.router.app import Router, serve
from llm_operator.router.routes import Options

from fake_vllm import host_ip
from redisserver import free_port

SLICES = "discovery.k8s.io/v1"


def peer_slice(name: str, port: int) -> dict[str, Any]:
    """The router Service's EndpointSlice for one replica (pod ``name``) on ``port``."""
    return {"apiVersion": SLICES, "kind": "EndpointSlice",
            "metadata": {"name": name, "labels": {"kubernetes.io/service-name": "peers"}},
            "addressType": "IPv4", "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [host_ip()], "conditions": {"ready": True},
                           "targetRef": {"kind": "Pod", "name": name}}]}


@contextlib.asynccontextmanager
async def two_routers(conn: Connection, admin: Kube, namespace: str
                      ) -> AsyncIterator[list[Cluster]]:
    await admin.request("POST", f"/api/v1/namespaces/{namespace}/services", body={
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "peers"},
        "spec": {"ports": [{"name": "http", "port": 8080}]}})
    ports = {"router-1": free_port(), "router-2": free_port()}
    for name, port in ports.items():
        await admin.request("POST", f"/apis/{SLICES}/namespaces/{namespace}/endpointslices",
                            body=peer_slice(name, port))
    async with contextlib.AsyncExitStack() as stack:
        clusters, tasks, stop = [], [], asyncio.Event()
        for name, port in ports.items():
            kube = await stack.enter_async_context(Kube(conn))
            router = Router(kube, [namespace], options=Options(60, 0.1), scrape_seconds=0.1,
                            peers=(namespace, "peers"), port=port, identity=name)
            ready = asyncio.Event()
            tasks.append(asyncio.create_task(serve(router, host_ip(), port, ready=ready,
                                                   stop=stop)))
            await ready.wait()
            clusters.append(Cluster(admin, namespace, router, f"http://{host_ip()}:{port}"))
        try:
            async with asyncio.timeout(30):  # each sees both in its Service
                for cluster in clusters:
                    assert cluster.router.owners is not None
                    while len(cluster.router.owners.replicas) != 2:
                        cluster.router.rebuilt.clear()
                        await cluster.router.rebuilt.wait()
            yield clusters
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            for cluster in clusters:
                for fake in cluster.replicas:
                    await fake.stop()


async def test_a_request_on_either_replica_waits_on_the_one_owning_its_model(
        router_connection: Connection, admin: Kube, namespace: str) -> None:
    async with two_routers(router_connection, admin, namespace) as clusters, \
            aiohttp.ClientSession() as http:
        await clusters[0].model("gemma", known=True)  # created once, routed by both
        await clusters[1].known("gemma")
        label = f"{namespace}/gemma"
        first = clusters[0].router.owners
        assert first is not None
        owner, other = (clusters[0], clusters[1]) if first.owner(label) is None else \
            (clusters[1], clusters[0])
        assert other.router.owners is not None
        assert other.router.owners.owner(label) == owner.url
        # no replica yet: held, on the owner, though sent to the other
        stream = await http.post(f"{other.url}/v1/chat/completions",
                                 json={**CHAT, "stream": True})
        assert stream.status == 200
        assert await stream.content.readline() == b": waiting for model (Pending)\n"
        await owner.held(label, 1)
        assert other.router.gateway.holds.held.get(label, 0) == 0
        async with http.get(f"{other.url}/scale/{namespace}/gemma") as r:  # KEDA's read
            assert (await r.json())["held"] == 1  # the owner's
        async with http.get(f"{other.url}/scale") as r:  # summed over replicas: not twice
            assert (await r.json())["models"][label]["held"] == 0
        await owner.replica("gemma", 0)
        text = (await stream.read()).decode()
        words = [json.loads(line[6:])["choices"][0]["delta"]["content"]
                 for line in text.splitlines() if line.startswith("data: {")]
        assert "".join(words) == f"answered by {MODEL_ID}"
