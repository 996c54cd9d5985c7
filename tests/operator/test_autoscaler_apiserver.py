"""The built-in autoscaler on a real API server, reading a router that answers as scripted.

The operator runs as its ServiceAccount; it finds the router through an EndpointSlice of
Service ``llmop-router`` (as in a cluster) that points at a server on this machine whose
``GET /scale`` answers what each test sets (the API server refuses loopback endpoint
addresses, so that server listens on the machine's own address). The Deployment's
replicas, the model's status and its Events are read back through the API, as `kubectl`
would.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llm_operator.kube import Kube
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.profiles.settings import Settings

from apitools import API, create, operator_connection, until
from controlplane import ControlPlane
from operators import running_operator
from samples import REPO, load_yaml

NAME = "gemma-auto"


@dataclass
class FakeRouter:
    """What the router's ``GET /scale`` answers: the models' pending counts, or an error.

    ``pending`` is the count of the model called NAME; ``others`` those of other models.
    """

    namespace: str
    pending: int = 0
    status: int = 200
    others: dict[str, int] = field(default_factory=dict)

    async def scale(self, _: web.Request) -> web.Response:
        if self.status != 200:
            return web.json_response({"error": "scripted"}, status=self.status)
        counts = {NAME: self.pending, **self.others}
        return web.json_response({"models": {f"{self.namespace}/{name}": {
            "pending": n, "held": 0, "inFlight": n, "waiting": 0}
            for name, n in counts.items()}})


def model(minimum: int = 0, maximum: int = 2, cooldown: int = 3) -> dict[str, Any]:
    doc = copy.deepcopy(load_yaml(REPO / "examples" / "cluster" / "gemma-270m.yaml"))
    doc["metadata"]["name"] = NAME
    doc["spec"]["modelId"] = "gemma-auto"
    doc["spec"]["scaling"] = {"minReplicas": minimum, "maxReplicas": maximum,
                              "scaleUpThreshold": 4, "cooldownPeriodSeconds": cooldown}
    return doc


def own_address() -> str:
    """This machine's IPv4 address on its default route (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("10.255.255.255", 1))
        address: str = probe.getsockname()[0]
    assert not address.startswith("127."), "the machine has no address but loopback"
    return address


@contextlib.asynccontextmanager
async def scaling(apiserver: ControlPlane, kube: Kube, namespace: str, router: FakeRouter,
                  *, stabilization: float = 1.0, metrics: OperatorMetrics | None = None,
                  autoscaler: str = "builtin") -> AsyncIterator[None]:
    """The router's EndpointSlice and the operator with the built-in autoscaler on."""
    app = web.Application()
    app.router.add_get("/scale", router.scale)
    host = own_address()
    async with TestServer(app, host=host) as server:
        await apiserver.akubectl("apply", "-f", "-", stdin=json.dumps({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "llmop-router-test", "namespace": namespace,
                         "labels": {"kubernetes.io/service-name": "llmop-router"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": server.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [host], "conditions": {"ready": True}}]}))
        settings = Settings.model_validate({
            "autoscaler": autoscaler,
            "router": {"enabled": True, "namespace": namespace},
            "builtinAutoscaler": {"intervalSeconds": 0.1,
                                  "stabilizationSeconds": stabilization}})
        async with running_operator(operator_connection(apiserver), settings,
                                    namespaces=[namespace], timeout=30,
                                    metrics=metrics or OperatorMetrics()):
            yield


def replicas(n: int) -> Callable[[dict[str, Any] | None], bool]:
    return lambda d: bool(d and d["spec"].get("replicas") == n)


async def scaled_events(kube: Kube, namespace: str, name: str = NAME) -> list[str]:
    """The "Scaled" Events of the model, oldest first, as "from -> to (reason)"."""
    events = await kube.list("v1", "events", namespace)
    mine = [e for e in events if e.get("reason") == "Scaled"
            and e["involvedObject"].get("name") == name]
    mine.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))  # etcd's own order
    return [e["message"].split(":")[0] for e in mine]


async def until_scaled(kube: Kube, namespace: str, expected: list[str],
                       timeout: float = 30, name: str = NAME) -> None:
    """Until the model's "Scaled" Events are ``expected``: each is posted just after its
    scale write, so a test that saw the replicas change may list before it exists."""
    async with asyncio.timeout(timeout):
        while (seen := await scaled_events(kube, namespace, name)) != expected:
            assert seen == expected[:len(seen)], seen  # never a wrong or extra one
            await asyncio.sleep(0.1)  # Events are not watched here: nothing to wait on


def scaling_condition(obj: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Scaling"), {})


async def test_load_moves_a_model_from_zero_to_max_and_back_to_zero(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    router = FakeRouter(namespace)
    async with scaling(apiserver, kube, namespace, router):
        await create(kube, model(), namespace)
        # created at 1 (the API's default); idle for cooldownPeriodSeconds -> 0
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(0))
        idle = await until(kube, API, "llmmodels", namespace, NAME, lambda o: bool(
            scaling_condition(o).get("reason") == "Idle"
            and (o or {})["status"].get("desiredReplicas") == 0))
        assert (idle or {})["status"]["phase"] == "Idle"
        router.pending = 1  # a request held for the model: the first one wakes it
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(1))
        router.pending = 8  # 8 for 1 replica, 4 per replica wanted
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(2))
        loaded = await until(kube, API, "llmmodels", namespace, NAME, lambda o: bool(
            scaling_condition(o).get("reason") == "Load"))
        assert scaling_condition(loaded)["status"] == "True"
        assert scaling_condition(loaded)["message"].startswith("1 -> 2 replica(s): 8 request")
        router.pending = 0  # after the window (1 s): the floor of 1; idle 3 s: zero
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(1))
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(0))
        await until_scaled(kube, namespace, [
            "1 -> 0 replica(s) (Idle)", "0 -> 1 replica(s) (FirstRequest)",
            "1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (LoadFell)",
            "1 -> 0 replica(s) (Idle)"])


async def test_an_unreachable_router_holds_the_count_and_says_so(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    router, metrics = FakeRouter(namespace, status=503), OperatorMetrics()
    async with scaling(apiserver, kube, namespace, router, metrics=metrics):
        await create(kube, model(cooldown=0), namespace)
        held = await until(kube, API, "llmmodels", namespace, NAME, lambda o: bool(
            scaling_condition(o).get("reason") == "NoSignal"))
        condition = scaling_condition(held)
        assert condition["status"] == "False"
        assert condition["message"].startswith(
            f"holding 1 replica(s): router http://{own_address()}:")
        assert "GET /scale answered 503" in condition["message"]
        await until_looks(metrics, looks(metrics) + 10)
        deployment = await kube.get("apps/v1", "deployments", namespace, NAME)
        assert (deployment or {})["spec"]["replicas"] == 1  # never to zero on missing data
    assert await scaled_events(kube, namespace) == []


def looks(metrics: OperatorMetrics) -> float:
    return metrics.registry.get_sample_value("llmop_operator_autoscaler_looks_total") or 0.0


async def until_looks(metrics: OperatorMetrics, n: float, timeout: float = 10) -> None:
    """Until the autoscaler has looked ``n`` times (its counter; nothing else to wait on)."""
    async with asyncio.timeout(timeout):
        while looks(metrics) < n:
            await asyncio.sleep(0.05)


async def test_a_lowered_max_scales_down_once_and_a_new_leader_changes_nothing(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    router, metrics = FakeRouter(namespace, pending=8), OperatorMetrics()
    async with scaling(apiserver, kube, namespace, router, stabilization=3600,
                       metrics=metrics):
        # never idle here: the restart below is about the window, not about going to zero
        await create(kube, model(minimum=0, maximum=3, cooldown=3600), namespace)
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(2))
        await kube.merge_patch(API, "llmmodels", namespace, NAME,  # still autoscaled: 0..1
                               body={"spec": {"scaling": {"maxReplicas": 1}}})
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(1))
        await until_looks(metrics, looks(metrics) + 10)
        await kube.merge_patch(API, "llmmodels", namespace, NAME,
                               body={"spec": {"scaling": {"maxReplicas": 3}}})
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(2))
        # this leader's Events are in before it stops (a write's Event follows the write)
        await until_scaled(kube, namespace, [
            "1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (AboveMax)",
            "1 -> 2 replica(s) (Load)"])
        router.pending = 0  # the load is gone, but the window (an hour) still remembers it
    metrics = OperatorMetrics()
    async with scaling(apiserver, kube, namespace, router, stabilization=5, metrics=metrics):
        await until_looks(metrics, 10)  # a new leader: no memory, the count was "just set"
        deployment = await kube.get("apps/v1", "deployments", namespace, NAME)
        assert (deployment or {})["spec"]["replicas"] == 2
        # and it is the window that holds it: once it has passed, the count follows the load
        await until(kube, "apps/v1", "deployments", namespace, NAME, replicas(1))
        await until_scaled(kube, namespace, [
            "1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (AboveMax)",
            "1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (LoadFell)"])


async def test_a_model_across_nodes_scales_its_leaderworkerset(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """The same loop writes a LeaderWorkerSet's scale subresource (a replica: a group)."""
    doc = copy.deepcopy(load_yaml(REPO / "config" / "samples" / "edge" /
                                  "llama-405b-multinode-nvidia.yaml"))
    doc["metadata"]["name"] = NAME
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 3, "scaleUpThreshold": 4,
                              "cooldownPeriodSeconds": 3600}
    router = FakeRouter(namespace, pending=8)
    lws = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
    async with scaling(apiserver, kube, namespace, router, stabilization=3600):
        await create(kube, doc, namespace)
        scaled = await until(kube, *lws, namespace, NAME, replicas(2))
        assert scaled is not None and scaled["spec"]["leaderWorkerTemplate"]["size"] == 2
        await until_scaled(kube, namespace, ["1 -> 2 replica(s) (Load)"])


POOL_DIR = REPO / "examples" / "cluster" / "model-pool"
POOL_DEPLOYMENT = "gemma-small-pool"


def pool_member(file: str, minimum: int, cooldown: int) -> dict[str, Any]:
    doc = copy.deepcopy(load_yaml(POOL_DIR / file))
    doc["spec"]["scaling"] = {"minReplicas": minimum, "maxReplicas": 2,
                              "scaleUpThreshold": 4, "cooldownPeriodSeconds": cooldown}
    return doc


@pytest.mark.parametrize("autoscaler", ["builtin", "keda"])
async def test_a_pool_goes_to_zero_when_every_member_is_idle_and_wakes_for_any(
        apiserver: ControlPlane, kube: Kube, namespace: str, autoscaler: str) -> None:
    """The pool's engine scales on its members' requests added (the built-in autoscaler
    scales pools under KEDA too: no ScaledObject can add the members' queues)."""
    qa, chat = pool_member("gemma-pool-qa.yaml", 0, 2), pool_member("gemma-pool-chat.yaml",
                                                                     0, 3)
    names = [qa["metadata"]["name"], chat["metadata"]["name"]]
    router = FakeRouter(namespace, others=dict.fromkeys(names, 0))
    async with scaling(apiserver, kube, namespace, router, autoscaler=autoscaler):
        for doc in (qa, chat):
            await create(kube, doc, namespace)
        # created at 1 (the API's default); both idle for the longer cooldown -> 0
        await until(kube, "apps/v1", "deployments", namespace, POOL_DEPLOYMENT, replicas(0))
        for name in names:
            idle = await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
                (o or {}).get("status", {}).get("phase") == "Idle"))
            condition = scaling_condition(idle)
            assert condition["reason"] == "Idle", condition
            assert condition["message"].startswith("pool gemma-small: 1 -> 0 replica(s)")
        router.others[names[1]] = 1  # one request for one member wakes the pool
        await until(kube, "apps/v1", "deployments", namespace, POOL_DEPLOYMENT, replicas(1))
        router.others = {names[0]: 5, names[1]: 4}  # 9 for 1 replica, 4 per replica: 2 max
        await until(kube, "apps/v1", "deployments", namespace, POOL_DEPLOYMENT, replicas(2))
        router.others = dict.fromkeys(names, 0)
        await until(kube, "apps/v1", "deployments", namespace, POOL_DEPLOYMENT, replicas(0),
                    timeout=60)
        for name in names:  # each member's Events tell its pool's story
            await until_scaled(kube, namespace, [
                "pool gemma-small", "pool gemma-small", "pool gemma-small",
                "pool gemma-small", "pool gemma-small"], name=name)
        events = [e["message"] for e in await kube.list("v1", "events", namespace)
                  if e.get("reason") == "Scaled"
                  and e["involvedObject"].get("name") == names[0]]
        assert sorted(m.split(": ")[1] for m in events) == sorted([
            "1 -> 0 replica(s) (Idle)", "0 -> 1 replica(s) (FirstRequest)",
            "1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (LoadFell)",
            "1 -> 0 replica(s) (Idle)"])
        assert await scaled_events(kube, namespace, POOL_DEPLOYMENT) == []


async def test_a_member_that_keeps_one_replica_keeps_the_pool_from_zero(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    qa, chat = pool_member("gemma-pool-qa.yaml", 0, 0), pool_member("gemma-pool-chat.yaml",
                                                                     1, 0)
    names = [qa["metadata"]["name"], chat["metadata"]["name"]]
    router, metrics = FakeRouter(namespace, others=dict.fromkeys(names, 0)), OperatorMetrics()
    async with scaling(apiserver, kube, namespace, router, metrics=metrics):
        for doc in (qa, chat):
            await create(kube, doc, namespace)
        ready = await until(kube, API, "llmmodels", namespace, names[0], lambda o: bool(
            scaling_condition(o).get("reason")))
        assert scaling_condition(ready)["message"].startswith("pool gemma-small: ")
        await until_looks(metrics, looks(metrics) + 20)  # idle all along, cooldown 0
        deployment = await kube.get("apps/v1", "deployments", namespace, POOL_DEPLOYMENT)
        assert (deployment or {})["spec"]["replicas"] == 1
    assert await scaled_events(kube, namespace, names[0]) == []
