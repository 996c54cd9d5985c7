"""A cluster with neither KEDA nor Prometheus-Operator: models still run, without those children.

Its own control plane (only the LLMModel CRD installed): the API server answers the groups
it does not serve with a text/plain 404, which the session's full control plane never shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.kube import Kube, from_kubeconfig
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from apitools import CORE_KINDS, Reconciles, children, create, phase_is, until
from controlplane import ControlPlane, control_plane, missing
from operators import running_operator
from samples import REPO, sample_doc

API = "ai.example.io/v1alpha1"


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    if (reason := missing()) is not None:
        pytest.fail(f"the real control plane cannot start: {reason}")
    with control_plane(tmp_path_factory.mktemp("bare"), controllers=False) as plane:
        plane.kubectl("apply", "-k", str(REPO / "config" / "crd"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.start_controller_manager()
        plane.kubectl("create", "namespace", "ai-models")
        yield plane


def _placed(model: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((model or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Placed"), {})


async def test_a_model_whose_priority_class_is_missing_creates_nothing_until_it_exists(
        bare: ControlPlane) -> None:
    """The pods would be refused one by one ("no PriorityClass ... was found") while the rest
    of the model stood half-made: the model says which class is missing, and starts once
    config/priority is installed."""
    bare.kubectl("delete", "priorityclass", "llmop-critical", "--ignore-not-found")
    doc = sample_doc("qwen35-9b-cpu")
    doc["metadata"]["name"] = name = "critical-qwen"
    doc["spec"]["priority"] = "critical"
    async with Kube(from_kubeconfig(str(bare.kubeconfig))) as kube, running_operator(
            from_kubeconfig(str(bare.kubeconfig)), namespaces=["ai-models"], timeout=30):
        await create(kube, doc, "ai-models")
        failed = await until(kube, API, "llmmodels", "ai-models", name, phase_is("Failed"))
        placed = _placed(failed)
        assert placed["reason"] == "PriorityClassNotFound", placed
        assert placed["message"].startswith(
            "the PriorityClass llmop-critical that the model's pods name does not exist in "
            "this cluster: install the operator's classes (kubectl apply -k config/priority)")
        assert await children(bare, "ai-models", name, CORE_KINDS) == set()
        bare.kubectl("apply", "-k", str(REPO / "config" / "priority"))
        await until(kube, API, "llmmodels", "ai-models", name, phase_is("Pending"))
        assert ("Deployment", name) in await children(bare, "ai-models", name, CORE_KINDS)
        await kube.delete(API, "llmmodels", "ai-models", name)


async def test_a_model_runs_without_the_children_of_kinds_not_installed(
        bare: ControlPlane) -> None:
    bare.kubectl("apply", "-k", str(REPO / "config" / "priority"))  # as config/default does
    doc = sample_doc("qwen35-9b-cpu")
    name = doc["metadata"]["name"]
    seen = Reconciles()
    async with Kube(from_kubeconfig(str(bare.kubeconfig))) as kube, running_operator(
            from_kubeconfig(str(bare.kubeconfig)), namespaces=["ai-models"], timeout=30,
            on_reconcile=seen):
        created = await create(kube, doc, "ai-models")
        await until(kube, API, "llmmodels", "ai-models", name, phase_is("Pending"))
        outcome = await seen.applying(name)
    rendered = {(o["kind"], o["metadata"]["name"])
                for o in render(parse_llmmodel(created), Settings(),
                                owner_uid=created["metadata"]["uid"])}
    optional = {k for k in rendered if k[0] in {"ScaledObject", "HTTPScaledObject",
                                               "ServiceMonitor", "PodMonitor"}}
    assert optional, "the sample must render an optional kind for this test to mean anything"
    assert await children(bare, "ai-models", name, CORE_KINDS) == rendered - optional
    assert sorted(outcome.skipped) == sorted(f"{k}/{n}" for k, n in optional)
