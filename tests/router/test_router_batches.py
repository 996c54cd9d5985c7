"""The router's Batch API: every replica answers it from Redis, one runs batches (a Lease).

Two routers on the real API server share a real redis-server, as config/router-batch
deploys them. A batch created through the replica that does not lead is run by the one
that does; when the leader stops in the middle of a request, the other takes the Lease and
finishes the batch, each request once in its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import openai
import pytest
from test_router import Cluster, routing

from llm_operator.kube import Connection, Kube
from llm_operator.leader import LeaseTerms

from controlplane import ControlPlane
from redisserver import redis_server

REPO = Path(__file__).resolve().parents[2]
LEASE_NS = "llm-operator-system"


@pytest.fixture(scope="session")
def lease_rbac(apiserver: ControlPlane, router_rbac: None) -> None:
    """config/router-batch's Role: the router may write its Lease."""
    apiserver.kubectl("apply", "-f", str(REPO / "config" / "router-batch" / "lease-rbac.yaml"))
    apiserver.wait_allowed("system:serviceaccount:llm-operator-system:llmop-router",
                           "update", "leases.coordination.k8s.io", namespace=LEASE_NS)


def terms(identity: str, name: str) -> LeaseTerms:
    return LeaseTerms(LEASE_NS, identity, name, duration=15, renew_deadline=10, retry=0.1)


async def holder(admin: Kube, name: str) -> str | None:
    lease = await admin.get("coordination.k8s.io/v1", "leases", LEASE_NS, name)
    return None if lease is None else (lease.get("spec") or {}).get("holderIdentity")


async def until_holder(admin: Kube, name: str, identity: str) -> None:
    async with asyncio.timeout(30):
        while await holder(admin, name) != identity:
            await asyncio.sleep(0.05)  # the Lease is written by another client: poll it


@contextlib.asynccontextmanager
async def replica(conn: Connection, admin: Kube, namespace: str, identity: str,
                  redis_url: str, lease: str) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "redis": {"url": redis_url},
        "batch": {"enabled": True, "concurrency": 1, "pollSeconds": 0.1,
                  "retrySeconds": 0.05}}
    async with routing(conn, admin, namespace, batch_lease=terms(identity, lease),
                       **settings) as cluster:
        yield cluster


async def test_the_replica_holding_the_lease_runs_batches_and_another_takes_over(
        router_connection: Connection, admin: Kube, namespace: str, lease_rbac: None,
        tmp_path: Path) -> None:
    lease = f"batches-{namespace}"
    lines = [{"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
              "body": {"model": f"{namespace}/gemma",
                       "messages": [{"role": "user", "content": c}]}} for c in "abc"]
    data = "".join(json.dumps(line) + "\n" for line in lines).encode()
    async with redis_server(tmp_path) as url:
        leader = replica(router_connection, admin, namespace, "router-a", url, lease)
        first: Cluster | None = await leader.__aenter__()
        try:
            await until_holder(admin, lease, "router-a")
            async with replica(router_connection, admin, namespace, "router-b", url,
                               lease) as second:
                await second.model("gemma", known=True)
                fake = await second.replica("gemma", 0)  # outlives the first router
                await second.upstreams("gemma", 1)
                assert first is not None
                await first.upstreams("gemma", 1)
                fake.hold = asyncio.Event()  # the leader's first request waits
                async with openai.AsyncOpenAI(base_url=f"{second.url}/v1",
                                              api_key="unused", max_retries=0) as sdk:
                    # through the replica that does not lead: the leader runs it
                    uploaded = await sdk.files.create(file=("in.jsonl", data),
                                                      purpose="batch")
                    batch = await sdk.batches.create(input_file_id=uploaded.id,
                                                     endpoint="/v1/chat/completions",
                                                     completion_window="24h")
                    await fake.until(lambda: _served(fake.served, 1))
                    await leader.__aexit__(None, None, None)  # it stops mid-request
                    first = None
                    await until_holder(admin, lease, "router-b")
                    fake.hold.set()
                    runner = second.router.gateway.batch_runner
                    assert runner is not None
                    async with asyncio.timeout(30):
                        while (found := runner.store.batch(batch.id, "")) is None \
                                or found.status != "completed":
                            runner.changed.clear()
                            await runner.changed.wait()
                    done = await sdk.batches.retrieve(batch.id)
                    assert done.output_file_id is not None
                    output = (await sdk.files.content(done.output_file_id)).text
        finally:
            if first is not None:
                await leader.__aexit__(None, None, None)
    assert [json.loads(t)["custom_id"] for t in output.splitlines()] == ["a", "b", "c"]
    assert done.request_counts.completed == 3 and done.request_counts.failed == 0
    assert len(fake.served) >= 4  # "a" twice: cut by the leader stopping, then again


async def _served(served: list[str], count: int) -> bool:
    return len(served) >= count
