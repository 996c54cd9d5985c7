"""The built-in autoscaler and KEDA: one writer of replicas at any time, handed over cleanly."""

from __future__ import annotations

import copy
import functools
from typing import Any, cast

from llm_operator.api.validation import parse_llmmodel
from llm_operator.informer import Informer, Key
from llm_operator.kube import Kube
from llm_operator.operator.autoscaler import KEDA_KIND, Autoscaler
from llm_operator.operator.caches import MODEL_KIND, Caches
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile.autoscaling import Loads, Report
from llm_operator.reconcile.workloads import DEPLOYMENT_REF

from samples import REPO, load_yaml


class Writes:
    """A Kube that records what would be written (scale patches, Events)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.calls.append((method, path))
        return {}

    @property
    def scales(self) -> list[str]:
        return [p for m, p in self.calls if p.endswith("/scale")]


def caches_with(model: dict[str, Any], replicas: int) -> Caches:
    caches = Caches([None])
    for kind, plural in ((MODEL_KIND, "llmmodels"), (DEPLOYMENT_REF, "deployments"),
                         (KEDA_KIND, "scaledobjects")):
        caches.add(kind, functools.partial(Informer, cast(Kube, None), kind[0], plural))
    caches.informers[MODEL_KIND][None].objects[("ns", "m")] = model
    caches.informers[DEPLOYMENT_REF][None].objects[("ns", "m")] = {
        "metadata": {"name": "m", "namespace": "ns"}, "spec": {"replicas": replicas}}
    return caches


def keda_installed(caches: Caches, installed: bool) -> None:
    caches.informers[KEDA_KIND][None].absent = not installed


async def test_keda_appearing_stops_the_builtin_writer_and_requeues_the_models() -> None:
    doc = copy.deepcopy(load_yaml(REPO / "examples" / "cluster" / "gemma-270m.yaml"))
    doc["metadata"].update({"name": "m", "namespace": "ns", "resourceVersion": "1"})
    doc["spec"]["scaling"] = {"minReplicas": 0, "maxReplicas": 2, "scaleUpThreshold": 4}
    caches, kube, requeued = caches_with(doc, 1), Writes(), list[Key]()

    async def eight_pending() -> Loads:
        return {"ns/m": (8, 0.0)}

    scaler = Autoscaler(cast(Kube, kube), Settings.model_validate(
        {"autoscaler": "auto", "router": {"enabled": True}}), caches,
        requeue=requeued.append, metrics=OperatorMetrics(), read=eight_pending)
    keda_installed(caches, False)
    await scaler.look()
    assert kube.scales == ["/apis/apps/v1/namespaces/ns/deployments/m/scale"]
    model = parse_llmmodel(doc)
    assert (scaler.report(model) or Report(False, "", "")).reason == "Load"

    keda_installed(caches, True)  # KEDA's CRDs appear (the informer finds them)
    requeued.clear()
    for _ in range(5):
        await scaler.look()
    assert kube.scales == ["/apis/apps/v1/namespaces/ns/deployments/m/scale"]  # no new write
    assert requeued == [("ns", "m")]  # once: its ScaledObject is applied, its status updated
    assert scaler.report(model) == Report(
        True, "KEDA", "KEDA sets the replicas (ScaledObject m); operator setting autoscaler: "
        "auto")

    keda_installed(caches, False)  # and back, when KEDA goes away
    await scaler.look()
    assert len(kube.scales) == 2


async def test_keda_chosen_but_missing_is_reported_not_worked_around() -> None:
    doc = copy.deepcopy(load_yaml(REPO / "examples" / "cluster" / "gemma-270m.yaml"))
    doc["metadata"].update({"name": "m", "namespace": "ns", "resourceVersion": "1"})
    doc["spec"]["scaling"] = {"minReplicas": 0, "maxReplicas": 2}
    caches, kube = caches_with(doc, 1), Writes()
    scaler = Autoscaler(cast(Kube, kube), Settings.model_validate({"autoscaler": "keda"}),
                        caches, requeue=lambda _: None, metrics=OperatorMetrics())
    keda_installed(caches, False)
    await scaler.look()
    assert kube.calls == []
    report = scaler.report(parse_llmmodel(doc))
    assert report is not None and (report.active, report.reason) == (False, "KEDANotInstalled")
