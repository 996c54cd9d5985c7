"""What keeps a model serving through voluntary disruption and a full node: PodDisruptionBudgets
for models that may run two replicas or more, and the control plane's PriorityClass."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from k8s_schemas import validate_object
from samples import sample_doc


def _render(doc: dict[str, Any], settings: Settings | None = None) -> list[dict[str, Any]]:
    return render(parse_llmmodel(doc), settings or Settings(), owner_uid="uid-1")


def _with(stem: str, **spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sample_doc(stem))
    doc["spec"].update(spec)
    return dict(doc)


@pytest.mark.parametrize(("case", "doc", "budgets"), [
    ("autoscaled up to 4: the Deployment's pods", _with("qwen35-9b-cpu"),
     {"qwen35-9b-cpu": {"app": "qwen35-9b-cpu", "ai.example.io/model-name": "qwen35-9b-cpu"}}),
    ("never more than one replica: nothing to keep", _with(
        "qwen35-9b-cpu", scaling={"minReplicas": 1, "maxReplicas": 1}), {}),
    ("a remote model's two gateway replicas", _with("gpt55-remote"),
     {"gpt55-remote": {"app": "gpt55-remote", "ai.example.io/model-name": "gpt55-remote"}}),
    ("prefill and decode: one budget per role that runs two or more",
     _with("llama-70b-pd-nvidia"), "per-role"),
    ("a group across nodes: every pod of the model, one at a time",
     _with("llama-405b-multinode-nvidia", scaling={"minReplicas": 2, "maxReplicas": 2}),
     {"llama-405b": {"app": "llama-405b",
                               "ai.example.io/model-name": "llama-405b"}}),
])
def test_a_model_that_may_run_two_replicas_gets_a_budget_of_one_unavailable(
        case: str, doc: dict[str, Any], budgets: dict[str, Any] | str) -> None:
    objects = _render(doc)
    found = {o["metadata"]["name"]: o for o in objects if o["kind"] == "PodDisruptionBudget"}
    if budgets == "per-role":
        roles = [o for o in objects if o["kind"] == "Deployment"]
        expected = {d["metadata"]["name"]: d["spec"]["selector"]["matchLabels"]
                    for d in roles if d["spec"].get("replicas", 2) >= 2}
        assert expected, case
    else:
        assert isinstance(budgets, dict)
        expected = budgets
    assert {n: b["spec"]["selector"]["matchLabels"] for n, b in found.items()} == expected, case
    for budget in found.values():
        assert budget["spec"]["maxUnavailable"] == 1
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        assert budget["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # GC'd with it
        assert validate_object(budget) == []


@pytest.mark.parametrize(("stem", "kind", "name"), [
    ("gpt55-remote", "Deployment", "gpt55-remote"),
])
def test_a_remote_models_gateway_outranks_every_model(stem: str, kind: str, name: str) -> None:
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _render(sample_doc(stem))}
    pod = objects[(kind, name)]["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "llmop-control-plane"
    off = Settings.model_validate({"scheduling": {"priorityClasses": False}})
    objects = {(o["kind"], o["metadata"]["name"]): o for o in _render(sample_doc(stem), off)}
    assert "priorityClassName" not in objects[(kind, name)]["spec"]["template"]["spec"]


def test_a_pools_endpoint_picker_outranks_every_model() -> None:
    settings = Settings.model_validate({"inferencePool": {
        "enabled": True, "gateway": {"name": "gw", "namespace": "llm-d"},
        "endpointPicker": {"deploy": True}}})
    objects = _render(sample_doc("gemma4-31b-nvidia"), settings)
    (picker,) = [o for o in objects if o["kind"] == "Deployment"
                 and o["metadata"]["name"] != "gemma4-31b-nvidia"]
    assert picker["spec"]["template"]["spec"]["priorityClassName"] == "llmop-control-plane"
