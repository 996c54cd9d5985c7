"""The operator's GPU queue: claims from the watch caches, admissions kept current (thin).

The decisions are reconcile/queue.py's; this keeps each model's claim (re-derived only when
the model or its workload changed) and tells the controller which models' admission
changed, so that a model whose accelerators freed up is reconciled at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.informer import Key, key_of
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile import workloads
from llm_operator.reconcile.queue import (
    Admission,
    Claim,
    Workload,
    admit,
    claim_of,
    devices_by_node,
    node_of,
)
from llm_operator.render import RenderError, render

# The model's resourceVersion, and each live workload's kind, name and replicas.
Stamp = tuple[str, tuple[tuple[str, str, int], ...]]
# The live workloads of a model (namespace, name): (kind, object) of each that exists.
Live = Callable[[str, str], list[Workload]]


@dataclass
class GpuQueue:
    """Admissions of every watched accelerator model, given the cached Nodes."""

    settings: Settings
    models: Callable[[], Iterable[dict[str, Any]]]
    workloads: Live
    nodes: Callable[[], Iterable[dict[str, Any]]]
    slices: Callable[[], Iterable[dict[str, Any]]] = lambda: ()  # DRA drivers' ResourceSlices
    _claims: dict[Key, tuple[Stamp, Claim | None]] = field(default_factory=dict)
    _last: dict[Key, Admission] = field(default_factory=dict)

    def claim(self, doc: dict[str, Any]) -> Claim | None:
        """What the model claims (None: no accelerators, or it fails placement)."""
        key = key_of(doc)
        live = self.workloads(*key)
        stamp = (str(doc["metadata"].get("resourceVersion", "")), tuple(
            (kind, str(obj["metadata"]["name"]), int((obj.get("spec") or {}).get("replicas", 1)))
            for kind, obj in live))
        cached = self._claims.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        claim = None
        try:
            model = parse_llmmodel({k: v for k, v in doc.items() if k != "status"})
            if model.spec.needs_accelerators:
                served = live or workloads.rendered(render(model, self.settings), model.name)
                claim = claim_of(model, list(served), running=bool(live))
        except (InvalidModel, RenderError):
            claim = None  # it fails placement: the reconcile says why, it claims nothing
        self._claims[key] = (stamp, claim)
        return claim

    def admissions(self) -> dict[Key, Admission]:
        docs = [d for d in self.models() if wants_accelerators(d)
                and not d["metadata"].get("deletionTimestamp")]
        alive = {key_of(d) for d in docs}
        for gone in set(self._claims) - alive:
            del self._claims[gone]
        claims = [c for d in docs if (c := self.claim(d)) is not None]
        drivers = {dc.driver: vendor for vendor, dc in self.settings.dra.device_classes.items()}
        devices = devices_by_node(self.slices(), drivers)
        return admit(claims, [node_of(n, devices) for n in self.nodes()])

    def admission(self, model: LLMModel) -> Admission | None:
        return self.admissions().get((model.namespace or "", model.name))

    def changed(self) -> list[Key]:
        """Models whose admission changed since the last call (to reconcile now)."""
        current = self.admissions()
        changed = [k for k, a in current.items() if self._last.get(k) != a]
        self._last = current
        return changed


def wants_accelerators(doc: dict[str, Any]) -> bool:
    """A cheap look at the raw document: CPU and remote models never claim.

    spec.needs_accelerators decides for the rest, once parsed.
    """
    spec = doc.get("spec") or {}
    return spec.get("deploymentMode") == "local" and spec.get("acceleratorVendor") != "cpu"
