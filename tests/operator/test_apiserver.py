"""The operator against a real kube-apiserver and controller manager, as its ServiceAccount.

Every test runs the operator in-process with the token of `config/rbac`'s ServiceAccount
(a 403 anywhere fails it), in a namespace of its own, and waits on watch events.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from llm_operator.api import labels as L
from llm_operator.api.validation import parse_llmmodel
from llm_operator.informer import Informer
from llm_operator.kube import ApiError, Kube
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from apitools import (
    API,
    Reconciles,
    bind,
    children,
    create,
    exists,
    first_pod,
    gone,
    operator_connection,
    phase_is,
    set_pod,
    until,
)
from controlplane import ControlPlane
from operators import running_operator
from samples import EDGE_SAMPLES, GUIDE_SAMPLES, LOCAL_EXAMPLES, load_yaml

OPERATOR_USER = "system:serviceaccount:llm-operator-system:llm-operator"
SAMPLES = [p for p in GUIDE_SAMPLES + EDGE_SAMPLES]


@contextlib.asynccontextmanager
async def operating(apiserver: ControlPlane, namespace: str, settings: Settings | None = None,
                    **options: Any) -> AsyncIterator[None]:
    async with running_operator(operator_connection(apiserver), settings,
                                namespaces=[namespace], timeout=30, **options):
        yield


def operator_requests(apiserver: ControlPlane, since: int) -> list[dict[str, Any]]:
    return [e for e in apiserver.requests(since=since, user=OPERATOR_USER)
            if e.get("verb") != "watch"]


def writes_of(entries: list[dict[str, Any]]) -> list[str]:
    return sorted(f"{e['verb']} {e['objectRef'].get('resource')}/"
                  f"{e['objectRef'].get('name', '')}"
                  for e in entries if e.get("verb") in {"create", "patch", "update", "delete"})


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.stem)
async def test_each_sample_becomes_exactly_its_rendered_children(
        apiserver: ControlPlane, kube: Kube, namespace: str, path: Any) -> None:
    doc = load_yaml(path)
    name = doc["metadata"]["name"]
    async with operating(apiserver, namespace):
        created = await create(kube, doc, namespace)
        model = await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
            o and (o.get("status") or {}).get("observedGeneration") == 1))
    assert model is not None
    parsed = parse_llmmodel(model)
    # The session's cluster serves every CRD: disaggregation.workload auto picks the
    # DisaggregatedSet there.
    served = Settings.model_validate({"disaggregation": {"workload": "disaggregatedset"}})
    expected = {(o["kind"], o["metadata"]["name"])
                for o in render(parsed, served, owner_uid=created["metadata"]["uid"])}
    assert await children(apiserver, namespace, name) == expected
    assert model["metadata"]["labels"] == \
        (doc["metadata"].get("labels") or {}) | L.discovery_labels(parsed.spec)
    assert "finalizers" not in model["metadata"]  # nothing to clean up: never held up


async def test_status_follows_the_pods_the_controller_manager_creates(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """Real Deployment/ReplicaSet controllers make the Pod; the test plays scheduler and kubelet."""
    doc = load_yaml(next(p for p in SAMPLES if p.stem == "qwen35-9b-cpu"))
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}  # no KEDA: a fixed replica
    name, node = doc["metadata"]["name"], f"node-{namespace}"
    await apiserver.akubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    async with operating(apiserver, namespace):
        await create(kube, doc, namespace)
        await until(kube, API, "llmmodels", namespace, name, phase_is("Pending"))
        pod = await first_pod(kube, namespace, name)
        await bind(kube, namespace, pod["metadata"]["name"], node)
        await until(kube, API, "llmmodels", namespace, name, phase_is("Starting"))
        await set_pod(kube, pod, ready=True)
        ready = await until(kube, API, "llmmodels", namespace, name, phase_is("Ready"))
        assert ready is not None
        assert ready["status"]["currentReplicas"] == 1
        assert ready["status"]["acceleratorNodes"] == [node]
        await set_pod(kube, pod, ready=False, waiting="CrashLoopBackOff")
        degraded = await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
            o and (o.get("status") or {}).get("phase") == "Degraded"
            and o["status"].get("currentReplicas") == 0))  # once the ReplicaSet counts it
        assert degraded is not None
        assert "CrashLoopBackOff" in str(degraded["status"]["conditions"])
        assert "endpoint" not in degraded["status"]  # no replica serves: no endpoint
    await apiserver.akubectl("delete", "node", node)


def init_status(container: dict[str, Any], exit_code: int, message: str = "",
                restarts: int = 0) -> dict[str, Any]:
    """An init container's status as the kubelet reports it: done, or failing (back-off)."""
    stamp = "2026-11-23T00:00:00Z"
    done = {"terminated": {"exitCode": exit_code, "reason": "Completed" if exit_code == 0
                           else "Error", "message": message, "startedAt": stamp,
                           "finishedAt": stamp}}
    status: dict[str, Any] = {"name": container["name"], "image": container["image"],
                              "imageID": "", "ready": exit_code == 0, "restartCount": restarts}
    if exit_code == 0:
        return {**status, "state": done}
    return {**status, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": done}


async def test_the_model_file_check_reaches_status(apiserver: ControlPlane, kube: Kube,
                                                   namespace: str) -> None:
    """model-verify's termination message: the file's facts into status.model, or a
    checksum mismatch that fails the model (it is never served)."""
    doc = load_yaml(next(p for p in SAMPLES if p.stem == "qwen35-9b-cpu"))
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}
    doc["spec"]["modelSource"]["sha256"] = "ab" * 32
    name, node = doc["metadata"]["name"], f"node-{namespace}"
    facts = {"file": "Qwen3.5-9B-Q4_K_M.gguf", "sizeBytes": 5_680_000_000, "sha256": "ab" * 32,
             "architecture": "qwen35", "layers": 36, "contextLength": 262144,
             "headCount": 32, "headCountKV": 8, "quantization": "Q4_K_M"}
    await apiserver.akubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    async with operating(apiserver, namespace):
        await create(kube, doc, namespace)
        pod = await first_pod(kube, namespace, name)
        fetch, verify, prepare = pod["spec"]["initContainers"]
        assert verify["command"][-2:] == ["--sha256", "ab" * 32]
        await bind(kube, namespace, pod["metadata"]["name"], node)
        await set_pod(kube, pod, ready=True)
        await kube.merge_patch("v1", "pods", namespace, pod["metadata"]["name"], body={
            "status": {"initContainerStatuses": [
                init_status(fetch, 0), init_status(verify, 0, json.dumps(facts)),
                init_status(prepare, 0)]}}, subresource="status")
        ready = await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
            o and (o.get("status") or {}).get("model")))
        assert ready is not None and ready["status"]["model"] == facts  # nothing pruned
        await set_pod(kube, pod, ready=False)
        await kube.merge_patch("v1", "pods", namespace, pod["metadata"]["name"], body={
            "status": {"initContainerStatuses": [
                init_status(fetch, 0), init_status(verify, 1, "ChecksumMismatch: "
                                                   "Qwen3.5-9B-Q4_K_M.gguf has SHA-256 "
                                                   + "cd" * 32, restarts=1),
                {**init_status(prepare, 0), "state": {"waiting": {"reason": "PodInitializing"}}}
            ]}}, subresource="status")
        failed = await until(kube, API, "llmmodels", namespace, name, phase_is("Failed"))
        assert failed is not None and "endpoint" not in failed["status"]
        degraded = next(c for c in failed["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["reason"] == "ChecksumMismatch" and "cd" * 32 in degraded["message"]
    await apiserver.akubectl("delete", "node", node)


def containers(obj: dict[str, Any] | None) -> list[tuple[str, str, Any]]:
    """Each container's name, image and env."""
    pod = ((obj or {}).get("spec") or {}).get("template", {}).get("spec", {})
    return [(c["name"], c["image"], c.get("env")) for c in pod.get("containers", [])]


async def converged(apiserver: ControlPlane, kube: Kube, namespace: str, stem: str,
                    **options: Any) -> tuple[dict[str, Any], Reconciles]:
    """A sample created and reconciled once, with the operator still running (see callers)."""
    doc = load_yaml(next(p for p in SAMPLES if p.stem == stem))
    await create(kube, doc, namespace)
    model = await until(kube, API, "llmmodels", namespace, doc["metadata"]["name"],
                        lambda o: bool(o and (o.get("status") or {}).get("phase")))
    assert model is not None
    return model, options["reconciles"]


async def test_a_field_another_manager_adds_is_left_alone_and_never_reapplied(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """`kubectl set env` adds an env entry: apply would never remove it, so never loop."""
    seen = Reconciles()
    async with operating(apiserver, namespace, resync_seconds=0.2, on_reconcile=seen):
        model, _ = await converged(apiserver, kube, namespace, "gemma4-31b-nvidia",
                                   reconciles=seen)
        name = model["metadata"]["name"]
        await seen.next(1, name)  # settled: a resync with nothing to do
        mark = apiserver.audit_mark()
        await apiserver.akubectl("set", "env", f"deploy/{name}", "-n", namespace, "EXTRA=1")
        outcomes = await seen.next(5, name)  # the Deployment event, then resyncs
    assert [o.applied for o in outcomes] == [[]] * 5
    assert writes_of(operator_requests(apiserver, mark)) == []
    env = (await apiserver.akubectl(
        "get", f"deploy/{name}", "-n", namespace, "-o",
        "jsonpath={.spec.template.spec.containers[0].env[*].name}")).stdout
    assert "EXTRA" in env.split()


@pytest.mark.parametrize(("case", "change"), [
    ("image set by hand", lambda n, ns: ("set", "image", f"deploy/{n}", "-n", ns, "*=evil:1")),
    ("Service deleted", lambda n, ns: ("delete", "service", n, "-n", ns)),
    ("replicas scaled by hand", lambda n, ns: ("scale", f"deploy/{n}", "-n", ns,
                                               "--replicas=7")),
    ("an env var we set changed by hand", lambda n, ns: ("set", "env", f"deploy/{n}", "-n",
                                                         ns, "HOME=/elsewhere")),
])
async def test_drift_of_what_we_own_is_repaired(
        apiserver: ControlPlane, kube: Kube, namespace: str, case: str,
        change: Callable[[str, str], tuple[str, ...]]) -> None:
    seen = Reconciles()
    async with operating(apiserver, namespace, on_reconcile=seen):
        model, _ = await converged(apiserver, kube, namespace, "qwen35-9b-cpu",
                                   reconciles=seen)
        name = model["metadata"]["name"]
        # A fixed replica count (no KEDA): replicas are the operator's to keep.
        await kube.merge_patch(API, "llmmodels", namespace, name,
                               body={"spec": {"scaling": {"minReplicas": 1, "maxReplicas": 1}}})
        await until(kube, "apps/v1", "deployments", namespace, name,
                    lambda o: bool(o and o["spec"].get("replicas") == 1))
        before = {
            "deploy": await kube.get("apps/v1", "deployments", namespace, name),
            "service": await kube.get("v1", "services", namespace, name)}
        seen.drain()
        await apiserver.akubectl(*change(name, namespace))
        outcome = await seen.applying(name)
        assert outcome.reasons, case
        repaired = await until(kube, "apps/v1", "deployments", namespace, name, lambda o: bool(
            o and containers(o) == containers(before["deploy"]) and o["spec"]["replicas"] == 1))
        service = await until(kube, "v1", "services", namespace, name, exists)
    assert repaired is not None and service is not None
    assert service["spec"]["ports"] == before["service"]["spec"]["ports"]


async def test_a_restart_with_nothing_changed_writes_nothing_and_reads_from_watches(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    seen = Reconciles()
    stems = ["gemma4-31b-nvidia", "gpt55-remote", "qwen35-9b-cpu"]
    async with operating(apiserver, namespace, resync_seconds=0.3, on_reconcile=seen):
        names = [(await converged(apiserver, kube, namespace, stem, reconciles=seen))[0]
                 ["metadata"]["name"] for stem in stems]
        await seen.quiet(names)
    mark = apiserver.audit_mark()
    seen = Reconciles()
    async with operating(apiserver, namespace, resync_seconds=0.3, on_reconcile=seen):
        first = await seen.next(len(stems))
        resync = await seen.next(2 * len(stems))
    requests = operator_requests(apiserver, mark)
    assert writes_of(requests) == []
    assert [o.applied for o in first + resync] == [[]] * len(first + resync)
    counts = ControlPlane.count(requests)
    # Reads: one list per watched kind at start (26: the models, 19 kinds of children,
    # the models' Pods and their prefetch Pods, Nodes for the GPU queue and model images'
    # mounts, the DRA drivers' ResourceSlices, PriorityClasses, and the router's
    # EndpointSlices for the built-in autoscaler), then at most one GET per reconcile: the
    # Secret a model needs (each of these needs one); the rest comes from the watches.
    assert counts["reads"] - counts["get secrets"] == counts["list"] == 26
    assert counts["get secrets"] <= seen.total + len(stems)  # + those cut short by the stop


@pytest.mark.parametrize("operator_runs", [False, True],
                         ids=["operator down", "operator resyncing every 0.1 s"])
async def test_deleting_models_waits_for_nothing_and_their_children_are_collected(
        apiserver: ControlPlane, kube: Kube, namespace: str, operator_runs: bool) -> None:
    seen = Reconciles()
    stems = ["gpt55-remote", "gemini31-remote", "claude-opus47-remote"]
    async with operating(apiserver, namespace, resync_seconds=0.1, on_reconcile=seen):
        names = [(await converged(apiserver, kube, namespace, stem, reconciles=seen))[0]
                 ["metadata"]["name"] for stem in stems]
        if operator_runs:  # a delete meeting a resync used to wait a whole interval
            await apiserver.akubectl("delete", "llmmodels", "--all", "-n", namespace,
                                     "--timeout=10s")
    if not operator_runs:  # nothing may hold the delete up
        await apiserver.akubectl("delete", "llmmodels", "--all", "-n", namespace,
                                 "--timeout=10s")
    for name in names:  # the real garbage collector, which deletes in no fixed order
        await until(kube, "apps/v1", "deployments", namespace, name, gone)
        await until(kube, "v1", "services", namespace, name, gone)
        left = await children(apiserver, namespace, name)
        if left:  # a CI run once found the ServiceMonitor still there a moment later
            await apiserver.akubectl("wait", "--for=delete", "-n", namespace, "--timeout=30s",
                                     *(f"{kind.lower()}/{child}" for kind, child in left))
    assert not await children(apiserver, namespace, names[0])


async def test_the_finalizer_is_set_only_when_mcp_pushes_need_it(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """Pushes configured: exposed models get it and keep it until deregistration gave up."""
    push = Settings.model_validate({"mcp": {"adminUrl": "http://127.0.0.1:9", "attempts": 1,
                                            "tokenFile": "/nonexistent"}})
    doc = load_yaml(next(p for p in SAMPLES if p.stem == "gpt55-remote"))
    assert doc["spec"]["mcpExposure"]["enabled"]
    name = doc["metadata"]["name"]
    finalized = lambda o: bool(o and L.MCP_CLEANUP_FINALIZER in  # noqa: E731
                               (o["metadata"].get("finalizers") or []))
    async with operating(apiserver, namespace, push):
        await create(kube, doc, namespace)
        await until(kube, API, "llmmodels", namespace, name, finalized)
        await apiserver.akubectl("delete", "llmmodel", name, "-n", namespace, "--timeout=20s")
    events = (await apiserver.akubectl("get", "events", "-n", namespace, "-o",
                                       "jsonpath={.items[*].reason}")).stdout.split()
    assert "MCPDeregistrationFailed" in events
    # Without pushes, a finalizer left by an earlier operator version is taken off.
    doc["metadata"]["finalizers"] = [L.MCP_CLEANUP_FINALIZER]
    async with operating(apiserver, namespace):
        await create(kube, doc, namespace)
        await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
            o and not o["metadata"].get("finalizers")))


async def test_the_operator_rides_out_an_apiserver_restart(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    seen = Reconciles()
    async with operating(apiserver, namespace, on_reconcile=seen):
        await converged(apiserver, kube, namespace, "gpt55-remote", reconciles=seen)
        apiserver.stop_apiserver()
        await asyncio.to_thread(apiserver.start_apiserver)
        await asyncio.to_thread(apiserver.wait_served,
                                f"/apis/{API}/namespaces/{namespace}/llmmodels?limit=1")
        doc = load_yaml(next(p for p in SAMPLES if p.stem == "gemini31-remote"))
        await create(kube, doc, namespace)
        await until(kube, API, "llmmodels", namespace, doc["metadata"]["name"],
                    phase_is("Pending", "Proxying"), timeout=60)
    assert await children(apiserver, namespace, doc["metadata"]["name"])


def test_the_operator_was_never_refused(apiserver: ControlPlane) -> None:
    """Least privilege is enough: no request of the operator's ServiceAccount got a 403.

    Except while the API server was still starting after the restart test stopped it: its
    authorizer refuses everything until its caches are primed (audit annotation
    apiserver.k8s.io/startup: early=true), and the operator retries.
    """
    entries = apiserver.requests(user=OPERATOR_USER)
    refused = [f"{e['verb']} {e['objectRef']}" for e in entries
               if (e.get("responseStatus") or {}).get("code") == 403
               and "early=true" not in (e.get("annotations") or {}).get(
                   "apiserver.k8s.io/startup", "")]
    assert entries, "run with the other tests of this module"
    assert refused == []


async def test_status_carries_prometheus_metrics_when_enabled(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """Prometheus's HTTP API (fake, on loopback) answers the status queries."""
    asked: list[str] = []

    async def query(request: web.Request) -> web.Response:
        promql = request.query["query"]
        asked.append(promql)
        value = "120" if promql.endswith("* 60") else "850"
        return web.json_response({"status": "success", "data": {
            "resultType": "vector", "result": [{"metric": {}, "value": [0, value]}]}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    settings = Settings.model_validate({"statusMetrics": True,
                                        "prometheusAddress": str(server.make_url("/"))})
    try:
        async with operating(apiserver, namespace, settings):
            doc = load_yaml(next(p for p in SAMPLES if p.stem == "gemma4-31b-nvidia"))
            await create(kube, doc, namespace)
            model = await until(kube, API, "llmmodels", namespace, doc["metadata"]["name"],
                                lambda o: bool(o and (o.get("status") or {}).get(
                                    "requestsPerMinute")))
    finally:
        await server.close()
    assert model is not None
    status = model["status"]
    assert (status["requestsPerMinute"], status["averageLatencyMs"]) == (120, 850)
    assert any("vllm:e2e_request_latency_seconds_count" in q for q in asked)


async def test_a_kind_of_a_group_the_server_does_not_serve_is_absent_not_an_error(
        kube: Kube) -> None:
    """A cluster without KEDA answers its group with a text/plain 404, not a Status."""
    informer = Informer(kube, "example.com/v1", "widgets", None, absent_retry=3600)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 10)
        assert informer.absent and informer.objects == {}
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    with pytest.raises(ApiError) as caught:
        await kube.list("example.com/v1", "widgets", None)
    assert caught.value.status == 404 and "not found" in caught.value.message


async def test_models_wait_for_gpus_in_priority_order_and_start_as_they_free(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """A node with 2 GPUs (capacity the test writes), four models of 2 GPUs each: the
    first starts, the others wait (WaitingForGPU, by priority, then age), and each starts
    when the one holding the GPUs goes or the node grows; no pod is ever left Pending."""
    node = f"gpu-{namespace}"
    pool = {"nvidia.com/gpu.present": "true", "pool": namespace}  # only this test's node
    apiserver.add_node(node, {**pool, "nvidia.com/gpu.memory": "81559"},
                       {"nvidia.com/gpu": "2", "cpu": "64", "memory": "512Gi"})
    settings = Settings.model_validate({"vendors": {"nvidia": {"nodeSelector": pool}}})

    def model(name: str, priority: str) -> dict[str, Any]:
        doc = load_yaml(next(p for p in SAMPLES if p.stem == "gemma4-31b-nvidia"))
        doc["metadata"]["name"] = name
        doc["spec"].update(priority=priority, scaling={"minReplicas": 1, "maxReplicas": 1},
                           mcpExposure={"enabled": False})
        doc["spec"]["resources"]["acceleratorCount"] = 2
        return doc

    def waiting(position: int) -> Callable[[dict[str, Any] | None], bool]:
        return lambda o: bool(o and (o.get("status") or {}).get("phase") == "WaitingForGPU"
                              and o["status"].get("queuePosition") == position)

    async def deployment(name: str) -> dict[str, Any] | None:
        return await until(kube, "apps/v1", "deployments", namespace, name, exists)

    async with operating(apiserver, namespace, settings):
        await create(kube, model("holder", "batch"), namespace)
        held = await deployment("holder")
        assert held is not None
        assert held["spec"]["template"]["spec"]["priorityClassName"] == "llmop-batch"
        await create(kube, model("normal", "normal"), namespace)
        queued = await until(kube, API, "llmmodels", namespace, "normal", waiting(1))
        assert queued is not None
        placed = next(c for c in queued["status"]["conditions"] if c["type"] == "Placed")
        assert (placed["status"], placed["reason"]) == ("False", "WaitingForGPU")
        assert "needs 1 x 2 nvidia.com/gpu; 0 free on matching nodes" in placed["message"]
        await create(kube, model("urgent", "high"), namespace)
        await until(kube, API, "llmmodels", namespace, "urgent", waiting(1))
        await until(kube, API, "llmmodels", namespace, "normal", waiting(2))  # moved back
        kinds = {kind for kind, _ in await children(apiserver, namespace, "normal")}
        assert kinds == {"PersistentVolumeClaim", "Service", "ServiceMonitor"}  # no workload
        await kube.delete(API, "llmmodels", namespace, "holder")
        started = await deployment("urgent")  # the GPUs freed: the head of the queue
        assert started is not None
        assert started["spec"]["template"]["spec"]["priorityClassName"] == "llmop-high"
        await until(kube, API, "llmmodels", namespace, "normal", waiting(1))
        await apiserver.akubectl("patch", "node", node, "--subresource=status",
                                 "--type=merge", "-p", json.dumps({"status": {
                                     "allocatable": {"nvidia.com/gpu": "4"}}}))
        assert await deployment("normal") is not None  # the node grew
        events = await kube.list("v1", "events", namespace)
        assert any(e["reason"] == "WaitingForGPU" and e["involvedObject"]["name"] == "normal"
                   for e in events)
    await apiserver.akubectl("delete", "node", node)


@pytest.mark.parametrize("stem", ["gemma4-31b-nvidia", "qwen3-32b-sglang-nvidia"])
async def test_an_inference_pool_its_picker_and_route_when_enabled(
        apiserver: ControlPlane, kube: Kube, namespace: str, stem: str) -> None:
    """Accepted by the real API server with the upstream InferencePool and Gateway API CRDs
    (their CEL rules included), applied as the operator's ServiceAccount (which may grant
    the picker's Role only because it holds those rights itself), collected with the
    model."""
    settings = Settings.model_validate({"inferencePool": {"enabled": True}})
    doc = load_yaml(next(p for p in SAMPLES if p.stem == stem))
    name = doc["metadata"]["name"]
    async with operating(apiserver, namespace, settings):
        await create(kube, doc, namespace)
        pool = await until(kube, "inference.networking.k8s.io/v1", "inferencepools",
                           namespace, name, exists)
        route = await until(kube, "gateway.networking.k8s.io/v1", "httproutes", namespace,
                            name, exists)
        assert pool is not None and route is not None
        assert pool["spec"]["endpointPickerRef"]["name"] == f"{name}-epp"
        assert route["spec"]["rules"][0]["backendRefs"][0]["kind"] == "InferencePool"
        picker = await children(apiserver, namespace, name)
        assert {("ServiceAccount", f"{name}-epp"), ("Role", f"{name}-epp"),
                ("RoleBinding", f"{name}-epp"), ("ConfigMap", f"{name}-epp"),
                ("Deployment", f"{name}-epp"), ("Service", f"{name}-epp")} <= picker
        # the picker's identity may read what its upstream chart grants it
        can = await apiserver.akubectl(
            "auth", "can-i", "watch", "inferencepools.inference.networking.k8s.io", "-n",
            namespace, f"--as=system:serviceaccount:{namespace}:{name}-epp", check=False)
        assert can.stdout.strip() == "yes"
        await kube.delete(API, "llmmodels", namespace, name)
        assert await until(kube, "inference.networking.k8s.io/v1", "inferencepools",
                           namespace, name, gone, timeout=60) is None
        assert await until(kube, "rbac.authorization.k8s.io/v1", "roles", namespace,
                           f"{name}-epp", gone, timeout=60) is None


async def test_a_registered_model_is_withdrawn_when_its_machine_stops_renewing(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """What `llmop up --register` publishes is served while its Lease is renewed: the
    operator looks again when the Lease would lapse, fails the model then (no renewal
    needed to notice), and serves it again once the machine renews."""
    import datetime  # noqa: PLC0415

    from llm_operator.render.registration import (  # noqa: PLC0415
        key_secret,
        lease_object,
        registered_model,
    )

    lease = "llmop-up-laptop"
    doc = registered_model(parse_llmmodel(load_yaml(next(
        p for p in LOCAL_EXAMPLES.glob("gemma3-270m.yaml")))), namespace=namespace,
        base_url="http://10.0.0.7:8000/v1", lease=lease)

    async def renew(duration: int) -> None:
        obj = lease_object(namespace, lease, lease, datetime.datetime.now(tz=datetime.UTC))
        obj["spec"]["leaseDurationSeconds"] = duration
        await kube.apply(obj, field_manager="llmop-up")

    async with operating(apiserver, namespace):
        await kube.apply(key_secret(namespace, lease), field_manager="llmop-up")
        await renew(4)  # lapses in 4 s unless renewed
        await kube.apply(doc, field_manager="llmop-up")
        alive = await until(kube, API, "llmmodels", namespace, "gemma3-270m", lambda o: bool(
            o and (o.get("status") or {}).get("phase") not in (None, "Failed")))
        assert alive is not None
        withdrawn = await until(kube, API, "llmmodels", namespace, "gemma3-270m",
                                phase_is("Failed"), timeout=20)
        assert withdrawn is not None
        placed = next(c for c in withdrawn["status"]["conditions"] if c["type"] == "Placed")
        assert placed["reason"] == "RegistrationExpired"
        assert f"has not renewed its Lease {lease} since" in placed["message"]
        await renew(30)
        back = await until(kube, API, "llmmodels", namespace, "gemma3-270m", lambda o: bool(
            o and (o.get("status") or {}).get("phase") not in (None, "Failed")), timeout=20)
        assert back is not None


def _adapters_in(config_map: dict[str, Any] | None) -> list[str]:
    data = json.loads(((config_map or {}).get("data") or {}).get("adapters.json", "[]"))
    return [entry["name"] for entry in data]


async def test_changing_vllm_adapters_rewrites_their_list_and_restarts_nothing(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """The adapter list is a ConfigMap the lora-sync sidecar follows, not part of the pod
    template: swapping a Hugging Face adapter leaves the Deployment's generation (so its
    pods) as it was. Removing every adapter drops LoRA from vLLM and prunes the list."""
    doc = load_yaml(next(p for p in SAMPLES if p.stem == "llama32-3b-lora-nvidia"))
    name = doc["metadata"]["name"]
    list_name = f"{name}-lora-adapters"
    adapters = doc["spec"]["loraAdapters"]
    async with operating(apiserver, namespace):
        await create(kube, doc, namespace)
        first = await until(kube, "v1", "configmaps", namespace, list_name, exists)
        assert _adapters_in(first) == ["text2sql", "support-tone", "legal-summaries"]
        deploy = await until(kube, "apps/v1", "deployments", namespace, name, exists)
        assert deploy is not None
        swapped = [{"name": "text2sql-v2", "rank": 8, "source": {
            "type": "huggingface", "repo": "acme/llama32-3b-text2sql-v2"}}, *adapters[1:]]
        await kube.merge_patch(API, "llmmodels", namespace, name,
                               body={"spec": {"loraAdapters": swapped}})
        await until(kube, "v1", "configmaps", namespace, list_name, lambda o: _adapters_in(o)
                    == ["text2sql-v2", "support-tone", "legal-summaries"])
        after = await kube.get("apps/v1", "deployments", namespace, name)
        assert after["metadata"]["generation"] == deploy["metadata"]["generation"]
        assert after["spec"]["template"] == deploy["spec"]["template"]

        await kube.merge_patch(API, "llmmodels", namespace, name,
                               body={"spec": {"loraAdapters": None}})
        assert await until(kube, "v1", "configmaps", namespace, list_name, gone) is None
        plain = await until(kube, "apps/v1", "deployments", namespace, name, lambda o: bool(
            o and "--enable-lora" not in o["spec"]["template"]["spec"]["containers"][0]["args"]))
    assert plain is not None
    assert [c["name"] for c in plain["spec"]["template"]["spec"]["containers"]] == \
        ["inference-server"]
