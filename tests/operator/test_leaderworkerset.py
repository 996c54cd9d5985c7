"""A replica across nodes: the operator applies, repairs and reads its LeaderWorkerSet.

On the session's real API server (with the upstream LeaderWorkerSet CRD, and no
LeaderWorkerSet controller: the test writes the status that controller would), and on the
emulator for a cluster without the CRD.
"""

from __future__ import annotations

import copy
from typing import Any

from llm_operator.kube import Kube
from llm_operator.operator.reconciler import DirectView, reconcile
from llm_operator.profiles.settings import Settings

from apitools import API, create, exists, gone, operator_connection, phase_is, until
from cluster import Cluster
from controlplane import ControlPlane
from operators import connect, running_operator
from samples import EDGE_SAMPLES, load_yaml

LWS = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
SAMPLE = next(p for p in EDGE_SAMPLES if p.stem == "llama-405b-multinode-nvidia")
OPERATOR = "system:serviceaccount:llm-operator-system:llm-operator"


def _model() -> dict[str, Any]:
    doc = load_yaml(SAMPLE)
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}  # a fixed count
    return doc


def _condition(model: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = ((model or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


async def _set_status(kube: Kube, namespace: str, name: str, ready: int,
                      conditions: list[tuple[str, str, str]]) -> None:
    """What the LeaderWorkerSet controller reports: groups, and its conditions."""
    stamp = "2026-11-25T00:00:00Z"
    await kube.merge_patch(*LWS, namespace, name, subresource="status", body={"status": {
        "replicas": 1, "readyReplicas": ready, "updatedReplicas": 1,
        "conditions": [{"type": t, "status": s, "reason": r, "message": r,
                        "lastTransitionTime": stamp} for t, s, r in conditions]}})


async def test_status_follows_the_leaderworkersets_groups_and_drift_is_repaired(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    doc = _model()
    name = doc["metadata"]["name"]
    async with running_operator(operator_connection(apiserver), namespaces=[namespace],
                                timeout=30):
        await create(kube, doc, namespace)
        lws = await until(kube, *LWS, namespace, name, exists)
        assert lws is not None and lws["spec"]["replicas"] == 1
        assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
        pending = await until(kube, API, "llmmodels", namespace, name, phase_is("Pending"))
        assert _condition(pending, "Placed")["status"] == "True"

        await _set_status(kube, namespace, name, 1, [
            ("Available", "True", "AllGroupsReady"), ("UpdateInProgress", "False", "Done")])
        ready = await until(kube, API, "llmmodels", namespace, name, phase_is("Ready"))
        assert ready is not None and ready["status"]["currentReplicas"] == 1
        assert _condition(ready, "Available")["status"] == "True"

        await _set_status(kube, namespace, name, 1, [
            ("Available", "True", "AllGroupsReady"), ("UpdateInProgress", "True", "Rolling")])
        rolling = await until(kube, API, "llmmodels", namespace, name, lambda o: bool(
            _condition(o, "Progressing").get("reason") == "RollingOut"))
        assert rolling is not None

        # Drift: a hand edit of what the operator owns is undone; a deleted one comes back.
        await kube.merge_patch(*LWS, namespace, name, body={"spec": {
            "leaderWorkerTemplate": {"size": 3}}})
        repaired = await until(kube, *LWS, namespace, name, lambda o: bool(
            o and o["spec"]["leaderWorkerTemplate"]["size"] == 2))
        assert repaired is not None
        await kube.delete(*LWS, namespace, name)
        back = await until(kube, *LWS, namespace, name, lambda o: bool(
            o and o["metadata"]["uid"] != lws["metadata"]["uid"]))
        assert back is not None
    await kube.delete(API, "llmmodels", namespace, name)
    assert await until(kube, *LWS, namespace, name, gone) is None  # collected with the model


def test_the_operator_may_scale_leaderworkersets(apiserver: ControlPlane) -> None:
    """The built-in autoscaler writes a LeaderWorkerSet's scale subresource."""
    answer = apiserver.kubectl("auth", "can-i", "patch", "leaderworkersets.leaderworkerset"
                               ".x-k8s.io", "--subresource=scale", "--as", OPERATOR,
                               "-n", "default", check=False)
    assert answer.stdout.strip() == "yes"


class WithoutLeaderWorkerSet(DirectView):
    """A cluster that has not installed the LeaderWorkerSet CRD."""

    def serves(self, api_version: str, kind: str) -> bool:
        return kind != "LeaderWorkerSet"


async def test_without_the_crd_the_model_fails_with_what_to_install(cluster: Cluster) -> None:
    doc = copy.deepcopy(_model())
    doc["spec"]["modelSource"].pop("huggingFaceTokenSecret")
    async with Kube(connect(cluster)) as kube:
        created = await kube.request(
            "POST", f"/apis/{API}/namespaces/ai-models/llmmodels", body=doc)
        outcome = await reconcile(kube, created, Settings(),
                                  view=WithoutLeaderWorkerSet(kube))
        model = await kube.get(API, "llmmodels", "ai-models", doc["metadata"]["name"])
    assert outcome.applied == [] and outcome.phase == "Failed"
    placed = _condition(model, "Placed")
    assert placed["reason"] == "LeaderWorkerSetNotInstalled"
    assert "spans 2 nodes per replica" in placed["message"]
    assert "install LeaderWorkerSet" in placed["message"]


async def test_a_group_waits_for_gpus_until_every_pod_of_it_can_be_placed(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    """2 nodes x 8 GPUs per replica: one 8-GPU node can never hold it; a second one can."""
    pool = {"nvidia.com/gpu.present": "true", "pool": namespace}  # only this test's nodes
    labels = {**pool, "nvidia.com/gpu.memory": "196608"}
    first, second = f"gpu-a-{namespace}", f"gpu-b-{namespace}"
    capacity = {"nvidia.com/gpu": "8", "cpu": "256", "memory": "2Ti"}
    apiserver.add_node(first, labels, capacity)
    settings = Settings.model_validate({"vendors": {"nvidia": {"nodeSelector": pool}}})
    doc = _model()
    name = doc["metadata"]["name"]
    try:
        async with running_operator(operator_connection(apiserver), settings,
                                    namespaces=[namespace], timeout=30):
            await create(kube, doc, namespace)
            waiting = await until(kube, API, "llmmodels", namespace, name,
                                  phase_is("WaitingForGPU"))
            assert "needs 2 x 8 nvidia.com/gpu, and no set of matching schedulable nodes " \
                "could ever hold it" in _condition(waiting, "Placed")["message"]
            assert await kube.get(*LWS, namespace, name) is None  # nothing is spent
            apiserver.add_node(second, labels, capacity)
            assert await until(kube, *LWS, namespace, name, exists) is not None
    finally:
        for node in (first, second):
            await apiserver.akubectl("delete", "node", node, "--ignore-not-found")
