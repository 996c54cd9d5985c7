"""Prefill and decode roles: the operator applies them as the cluster allows and reads them.

On the session's real API server (every CRD installed, the real ReplicaSet controllers; the
test plays scheduler and kubelet, and the DisaggregatedSet controller, which does not run
here), and on the emulator for clusters without the DisaggregatedSet CRD.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from llm_operator.kube import Kube
from llm_operator.operator.reconciler import DirectView, reconcile
from llm_operator.profiles.settings import Settings

from apitools import (
    API,
    bind,
    create,
    exists,
    first_pod,
    gone,
    operator_connection,
    phase_is,
    set_pod,
    until,
)
from cluster import Cluster
from controlplane import ControlPlane
from operators import connect, running_operator
from samples import EDGE_SAMPLES, load_yaml

DS = ("disaggregatedset.x-k8s.io/v1", "disaggregatedsets")
LWS = ("leaderworkerset.x-k8s.io/v1", "leaderworkersets")
SAMPLE = next(p for p in EDGE_SAMPLES if p.stem == "llama-70b-pd-nvidia")


def _model(prefill: int = 1, decode: int = 1) -> dict[str, Any]:
    doc = load_yaml(SAMPLE)
    doc["spec"]["serving"]["disaggregation"]["prefill"]["replicas"] = prefill
    doc["spec"]["serving"]["disaggregation"]["decode"]["replicas"] = decode
    return doc


def _settings(workload: str) -> Settings:
    return Settings.model_validate({"disaggregation": {"workload": workload}})


def _placed(model: dict[str, Any] | None) -> dict[str, Any]:
    return next(c for c in (model or {})["status"]["conditions"] if c["type"] == "Placed")


async def test_as_deployments_status_counts_the_decode_pods(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    doc = _model()
    name, node = doc["metadata"]["name"], f"node-{namespace}"
    await apiserver.akubectl("create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}))
    async with running_operator(operator_connection(apiserver), _settings("deployments"),
                                namespaces=[namespace], timeout=30):
        await create(kube, doc, namespace)
        for role in ("prefill", "decode"):
            assert await until(kube, "apps/v1", "deployments", namespace,
                               f"{name}-{role}", exists)
        prefill = await first_pod(kube, namespace, name, also="llm-d.ai/role=prefill")
        await bind(kube, namespace, prefill["metadata"]["name"], node)
        await set_pod(kube, prefill, ready=True)
        starting = await until(kube, API, "llmmodels", namespace, name, phase_is("Starting"))
        assert starting is not None  # a ready prefill pod serves no client on its own

        decode = await first_pod(kube, namespace, name, also="llm-d.ai/role=decode")
        await bind(kube, namespace, decode["metadata"]["name"], node)
        await set_pod(kube, decode, ready=True)
        ready = await until(kube, API, "llmmodels", namespace, name, phase_is("Ready"))
        assert ready is not None and ready["status"]["currentReplicas"] == 1
        assert ready["status"]["desiredReplicas"] == 1
    await apiserver.akubectl("delete", "node", node)


async def test_as_a_disaggregatedset_status_reads_its_decode_role(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    doc = _model(prefill=1, decode=2)
    name = doc["metadata"]["name"]
    async with running_operator(operator_connection(apiserver), namespaces=[namespace],
                                timeout=30):  # workload auto: the cluster serves the CRD
        await create(kube, doc, namespace)
        ds = await until(kube, *DS, namespace, name, exists)
        assert ds is not None
        assert [r["spec"]["replicas"] for r in ds["spec"]["roles"]] == [1, 2]
        assert await kube.get("apps/v1", "deployments", namespace, f"{name}-decode") is None
        # what the DisaggregatedSet controller makes of a role: a LeaderWorkerSet with the
        # role's metadata, owned by the set; the operator must leave it alone
        decode = ds["spec"]["roles"][1]
        made = await kube.request("POST", f"/apis/{LWS[0]}/namespaces/{namespace}/{LWS[1]}",
                                  body={"apiVersion": LWS[0], "kind": "LeaderWorkerSet",
                                        "metadata": {
                                            "name": f"{name}-decode-0",
                                            "labels": decode["metadata"]["labels"],
                                            "ownerReferences": [{
                                                "apiVersion": DS[0],
                                                "kind": "DisaggregatedSet", "name": name,
                                                "uid": ds["metadata"]["uid"],
                                                "controller": True}]},
                                        "spec": decode["spec"]})
        stamp = "2026-11-25T00:00:00Z"
        await kube.merge_patch(*DS, namespace, name, subresource="status", body={"status": {
            "roleStatuses": [
                {"name": "prefill", "replicas": 1, "readyReplicas": 1, "updatedReplicas": 1},
                {"name": "decode", "replicas": 2, "readyReplicas": 2, "updatedReplicas": 2}],
            "conditions": [{"type": "Available", "status": "True", "reason": "Ready",
                            "message": "", "lastTransitionTime": stamp}]}})
        ready = await until(kube, API, "llmmodels", namespace, name, phase_is("Ready"))
        assert ready is not None and ready["status"]["currentReplicas"] == 2
        # reconciled since (the status above): the role's LeaderWorkerSet is still there
        kept = await kube.get(*LWS, namespace, f"{name}-decode-0")
        assert kept is not None and kept["metadata"]["uid"] == made["metadata"]["uid"]


class Without(DirectView):
    """A cluster that has not installed the DisaggregatedSet CRD."""

    def serves(self, api_version: str, kind: str) -> bool:
        return kind != "DisaggregatedSet"


@pytest.mark.parametrize(("workload", "phase", "applied"), [
    ("auto", "Pending", ["Deployment/llama-70b-pd-prefill", "Deployment/llama-70b-pd-decode"]),
    ("disaggregatedset", "Failed", []),
])
async def test_without_the_crd(cluster: Cluster, workload: str, phase: str,
                               applied: list[str]) -> None:
    """auto falls back to Deployments; asked for by name, the model says what to install."""
    doc = copy.deepcopy(_model())
    doc["spec"]["modelSource"].pop("huggingFaceTokenSecret")
    async with Kube(connect(cluster)) as kube:
        created = await kube.request(
            "POST", f"/apis/{API}/namespaces/ai-models/llmmodels", body=doc)
        outcome = await reconcile(kube, created, _settings(workload), view=Without(kube))
        model = await kube.get(API, "llmmodels", "ai-models", doc["metadata"]["name"])
    assert outcome.phase == phase
    assert [a for a in outcome.applied if a.startswith("Deployment/")] == applied
    if phase == "Failed":
        assert _placed(model)["reason"] == "DisaggregatedSetNotInstalled"
        assert "set disaggregation.workload to auto or deployments" in \
            _placed(model)["message"]


async def test_changing_the_workload_setting_replaces_one_shape_with_the_other(
        apiserver: ControlPlane, kube: Kube, namespace: str) -> None:
    doc = _model()
    name = doc["metadata"]["name"]
    connection = operator_connection(apiserver)
    async with running_operator(connection, _settings("disaggregatedset"),
                                namespaces=[namespace], timeout=30):
        await create(kube, doc, namespace)
        assert await until(kube, *DS, namespace, name, exists)
    async with running_operator(connection, _settings("deployments"), namespaces=[namespace],
                                timeout=30):
        for role in ("prefill", "decode"):
            assert await until(kube, "apps/v1", "deployments", namespace,
                               f"{name}-{role}", exists)
        assert await until(kube, *DS, namespace, name, gone) is None
