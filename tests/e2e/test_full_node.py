"""On the real node: a node full of models keeps its control plane, a crashed replica costs no
request, and a drain never takes a model's last serving replica.

The node has 2 cores. Copies of the Gemma example (500m each) fill it; the
operator, router and MCP server run at llmop-control-plane, above every model's class, so
the scheduler has nothing to preempt for the copy that does not fit. A two-replica copy
behind the router takes steady load while one replica's llama-server is SIGKILLed: the
router hands a request that was cut before its client got a byte to the other replica.
The Eviction API refuses the Ready replica of a model whose other replica is not Ready.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from e2e_cluster import GEMMA, MODELS_NS, OPERATOR_NS, NodeCluster, kubectl_watch
from load import SteadyLoad

pytestmark = pytest.mark.e2e
NS = MODELS_NS
CONTROL_PLANE = ((OPERATOR_NS, "llm-operator"), (OPERATOR_NS, "llmop-router"),
                 (MODELS_NS, "mcp-server"))


def copy_of(name: str, cpu: int, replicas: int = 1) -> dict[str, Any]:
    """The Gemma example under another name (and model id), at ``cpu`` millicores."""
    doc = yaml.safe_load(GEMMA.read_text())
    doc["metadata"]["name"] = name
    doc["spec"].update({"modelId": f"gemma-3-270m-{name}",
                        "scaling": {"minReplicas": replicas, "maxReplicas": replicas},
                        "mcpExposure": {"enabled": False}})
    doc["spec"]["resources"]["cpuMillicores"] = cpu
    return dict(doc)


def placed(cluster: NodeCluster, name: str) -> dict[str, Any]:
    model = cluster.json("-n", NS, "get", "llmmodel", name)
    return next((c for c in (model.get("status") or {}).get("conditions") or []
                 if c["type"] == "Placed"), {})


def control_plane_ready(cluster: NodeCluster) -> dict[str, tuple[int, int]]:
    """Each control-plane Deployment's (ready, wanted) replicas."""
    out = {}
    for namespace, name in CONTROL_PLANE:
        deployment = cluster.json("-n", namespace, "get", "deployment", name)
        out[name] = (deployment["status"].get("readyReplicas", 0),
                     deployment["spec"]["replicas"])
    return out


def apply(cluster: NodeCluster, *docs: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": list(docs)}))


def delete(cluster: NodeCluster, *names: str) -> None:
    cluster.clear_models(*names)  # pods force-deleted: nothing is in flight to drain


def test_a_full_node_preempts_no_part_of_the_control_plane(routed: NodeCluster) -> None:
    free = routed.free_cpu()
    fillers = [f"gemma-fill-{i}" for i in range(free // 500 + 1)]  # one more than fits
    before = control_plane_ready(routed)
    assert all(ready == wanted for ready, wanted in before.values()), before
    placing = ("jsonpath={.metadata.name} "
               "{.status.conditions[?(@.type==\"Placed\")].reason}{\"\\n\"}")
    with kubectl_watch(routed.plane, "-n", NS, "get", "llmmodels", "--watch", "-o",
                       placing) as models:
        apply(routed, *(copy_of(name, 500) for name in fillers))
        try:
            # the scheduler tried the copy that does not fit, and found nothing it may
            # preempt: the model says so with the scheduler's reason
            seen = models.until(lambda lines: any(
                line.endswith(" Unschedulable") for line in lines), 180)
        except BaseException:
            delete(routed, *fillers)
            raise
    try:
        (last,) = {line.split()[0] for line in seen if line.endswith(" Unschedulable")}
        for name in set(fillers) - {last}:  # the others are on the node
            routed.kubectl("-n", NS, "wait", "pods", "-l", f"app={name}", "--timeout=120s",
                           "--for=condition=PodScheduled")
        routed.wait_phase(NS, last, "Pending", 60)
        assert "Insufficient cpu" in placed(routed, last)["message"], placed(routed, last)
        preempted = [e for ns in (OPERATOR_NS, MODELS_NS) for e in routed.json(
            "-n", ns, "get", "events", "--field-selector", "reason=Preempted")["items"]]
        assert preempted == [], [e["message"] for e in preempted]
        assert control_plane_ready(routed) == before
        for namespace, name in CONTROL_PLANE:
            for pod in routed.json("-n", namespace, "get", "pods", "-l",
                                   f"app.kubernetes.io/component={pod_component(name)}")["items"]:
                assert pod["spec"]["priorityClassName"] == "llmop-control-plane"
                assert pod["spec"]["priority"] == 10_000_000
    finally:
        delete(routed, *fillers)


def pod_component(deployment: str) -> str:
    return {"llm-operator": "operator", "llmop-router": "router",
            "mcp-server": "mcp-server"}[deployment]


@pytest.fixture(scope="module")
def pair(routed: NodeCluster) -> Iterator[NodeCluster]:
    """A copy of the example at two replicas (250m each), both Ready, routed."""
    apply(routed, copy_of("gemma-pair", 250, replicas=2))
    routed.wait_phase(NS, "gemma-pair", "Ready", 180)
    routed.kubectl("-n", NS, "rollout", "status", "deployment/gemma-pair", "--timeout=120s")
    yield routed
    delete(routed, "gemma-pair")


def pods_of(cluster: NodeCluster, name: str) -> list[dict[str, Any]]:
    return list(cluster.json("-n", NS, "get", "pods", "-l", f"app={name}")["items"])


def restarts(pod: dict[str, Any]) -> int:
    return sum(s.get("restartCount", 0) for s in pod["status"].get("containerStatuses") or [])


async def test_a_replica_killed_under_load_costs_no_request(pair: NodeCluster) -> None:
    router = pair.service_url(OPERATOR_NS, "llmop-router", 8080)
    victim = pods_of(pair, "gemma-pair")[0]
    load = SteadyLoad(router, "gemma-3-270m-gemma-pair", clients=4, max_tokens=8)
    async with load.running():
        while len(load.outcomes) < 8:  # both replicas serving
            await asyncio.sleep(0.1)
        killed = pair.node.signal_in_pod(victim["metadata"]["uid"], "llama-server",
                                         signal.SIGKILL)
        assert killed, "no llama-server process in the victim's cgroup"
        await pair.plane.akubectl(
            "-n", NS, "wait", f"pod/{victim['metadata']['name']}", "--timeout=120s",
            "--for=jsonpath={.status.containerStatuses[0].restartCount}="
            f"{restarts(victim) + 1}")
        await pair.plane.akubectl("-n", NS, "wait", f"pod/{victim['metadata']['name']}",
                                  "--timeout=120s", "--for=condition=Ready")
        done = len(load.outcomes)
        while len(load.outcomes) < done + 8:  # and both serving again
            await asyncio.sleep(0.1)
    assert load.failures == [], load.summary()
    assert len(load.outcomes) >= 16


def evict(cluster: NodeCluster, pod: str) -> tuple[int, Any]:
    """The Eviction API, as `kubectl drain` calls it."""
    return cluster.plane.request("POST", f"/api/v1/namespaces/{NS}/pods/{pod}/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": NS}})


def test_a_drain_never_takes_the_last_ready_replica(pair: NodeCluster) -> None:
    """One replica made not Ready (its llama-server stopped, as a hung engine is), the
    Eviction API refuses the other; the unready one may go (AlwaysAllow)."""
    budget = pair.json("-n", NS, "get", "pdb", "gemma-pair")
    assert budget["spec"]["maxUnavailable"] == 1
    first, second = (p["metadata"] for p in pods_of(pair, "gemma-pair"))
    stopped = pair.node.signal_in_pod(first["uid"], "llama-server", signal.SIGSTOP)
    assert stopped
    try:
        pair.kubectl("-n", NS, "wait", f"pod/{first['name']}", "--timeout=90s",
                     "--for=condition=Ready=false")
        pair.kubectl("-n", NS, "wait", "pdb/gemma-pair", "--timeout=30s",
                     "--for=jsonpath={.status.disruptionsAllowed}=0")
        status, body = evict(pair, second["name"])
        assert status == 429, body
        assert "disruption budget" in body["message"], body
        status, body = evict(pair, first["name"])  # the unready one: the drain goes on
        assert status == 201, body
    finally:
        pair.node.signal_in_pod(first["uid"], "llama-server", signal.SIGCONT)
