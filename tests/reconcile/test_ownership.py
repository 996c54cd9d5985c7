"""Drift by field ownership: what must be applied again, and what must be left alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.reconcile.ownership import drift

MANAGER = "llm-operator"

DESIRED: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "m", "namespace": "ns", "labels": {"app": "m"}},
    "spec": {"template": {"spec": {
        "containers": [{"name": "main", "image": "vllm:1", "args": ["--port", "8000"],
                        "env": [{"name": "A", "value": "1"}],
                        "ports": [{"containerPort": 8000}]}],
        "volumes": [{"name": "cache", "emptyDir": {}}]}}},
}

# What the API server records for DESIRED applied by MANAGER (shape of real fieldsV1).
OURS: dict[str, Any] = {
    "f:metadata": {"f:labels": {"f:app": {}}},
    "f:spec": {"f:template": {"f:spec": {
        "f:containers": {'k:{"name":"main"}': {
            ".": {}, "f:name": {}, "f:image": {}, "f:args": {},
            "f:env": {'k:{"name":"A"}': {".": {}, "f:name": {}, "f:value": {}}},
            "f:ports": {'k:{"containerPort":8000,"protocol":"TCP"}': {
                ".": {}, "f:containerPort": {}}}}},
        "f:volumes": {'k:{"name":"cache"}': {".": {}, "f:name": {}, "f:emptyDir": {}}}}}},
}


def stored(obj: dict[str, Any], *owners: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    """``obj`` as the API server returns it: defaults filled in, managedFields recorded."""
    out = copy.deepcopy(obj)
    container = out["spec"]["template"]["spec"]["containers"][0]
    container["ports"][0]["protocol"] = "TCP"
    container["terminationMessagePath"] = "/dev/termination-log"
    out["spec"]["replicas"] = 1
    out["metadata"]["managedFields"] = [
        {"manager": m, "operation": op, "fieldsType": "FieldsV1", "fieldsV1": f}
        for m, op, f in owners]
    return out


def container(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


def edited(change: Any) -> dict[str, Any]:
    obj = copy.deepcopy(DESIRED)
    change(obj)
    return obj


def take_image(fields: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(fields)
    del out["f:spec"]["f:template"]["f:spec"]["f:containers"]['k:{"name":"main"}']["f:image"]
    return out


KUBECTL_ENV = {"f:spec": {"f:template": {"f:spec": {"f:containers": {'k:{"name":"main"}': {
    "f:env": {'k:{"name":"EXTRA"}': {".": {}, "f:name": {}, "f:value": {}}}}}}}}}


def with_extra_env(obj: dict[str, Any]) -> None:
    container(obj)["env"].append({"name": "EXTRA", "value": "1"})


# (case, current object, desired object, why it must be applied or None)
CASES: list[tuple[str, dict[str, Any], dict[str, Any], str | None]] = [
    ("as applied, server defaults aside", stored(DESIRED, (MANAGER, "Apply", OURS)), DESIRED,
     None),
    ("never applied by us", stored(DESIRED, ("kubectl", "Update", OURS)), DESIRED,
     "no fields are ours yet"),
    ("another manager added an env entry", stored(edited(with_extra_env),
                                                  (MANAGER, "Apply", OURS),
                                                  ("kubectl-set", "Update", KUBECTL_ENV)),
     DESIRED, None),
    ("another manager took the image", stored(
        edited(lambda o: container(o).update(image="evil:1")),
        (MANAGER, "Apply", take_image(OURS)), ("kubectl-set", "Update", {})), DESIRED,
     "spec.template.spec.containers[main].image is not ours"),
    ("we render a new image", stored(DESIRED, (MANAGER, "Apply", OURS)),
     edited(lambda o: container(o).update(image="vllm:2")),
     "spec.template.spec.containers[main].image differs"),
    ("we render a new env entry", stored(DESIRED, (MANAGER, "Apply", OURS)),
     edited(lambda o: container(o)["env"].append({"name": "B", "value": "2"})),
     "spec.template.spec.containers[main].env[B] is not ours"),
    ("we no longer render an env entry", stored(DESIRED, (MANAGER, "Apply", OURS)),
     edited(lambda o: container(o)["env"].clear()),
     "spec.template.spec.containers[main].env has an entry that is ours but no longer "
     "rendered"),
    ("we no longer render a label", stored(DESIRED, (MANAGER, "Apply", OURS)),
     edited(lambda o: o["metadata"].update(labels={})),
     "metadata.labels.app is ours but no longer rendered"),
    ("an atomic list changed", stored(DESIRED, (MANAGER, "Apply", OURS)),
     edited(lambda o: container(o).update(args=["--port", "9000"])),
     "spec.template.spec.containers[main].args differs"),
    ("a field we own was removed", stored(
        edited(lambda o: container(o).pop("args")), (MANAGER, "Apply", OURS)), DESIRED,
     "spec.template.spec.containers[main].args is missing"),
]


@pytest.mark.parametrize(("case", "current", "desired", "why"), CASES,
                         ids=[c[0] for c in CASES])
def test_drift(case: str, current: dict[str, Any], desired: dict[str, Any],
               why: str | None) -> None:
    assert drift(desired, current, MANAGER) == why
