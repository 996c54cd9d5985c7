"""The operator's GPU queue: claims from the watch caches, admissions kept current (thin).

The decisions are reconcile/queue.py's; this keeps each model's claim (re-derived only when
the model or its Deployment changed) and tells the controller which models' admission
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
from llm_operator.reconcile.queue import Admission, Claim, admit, claim_of, node_of
from llm_operator.render import RenderError, render

Stamp = tuple[str, int | None]  # the model's resourceVersion, its Deployment's replicas


@dataclass
class GpuQueue:
    """Admissions of every watched accelerator model, given the cached Nodes."""

    settings: Settings
    models: Callable[[], Iterable[dict[str, Any]]]
    deployment: Callable[[str, str], dict[str, Any] | None]
    nodes: Callable[[], Iterable[dict[str, Any]]]
    _claims: dict[Key, tuple[Stamp, Claim | None]] = field(default_factory=dict)
    _last: dict[Key, Admission] = field(default_factory=dict)

    def claim(self, doc: dict[str, Any]) -> Claim | None:
        """What the model claims (None: no accelerators, or it fails placement)."""
        key = key_of(doc)
        deployment = self.deployment(*key)
        replicas = int((deployment.get("spec") or {}).get("replicas", 1)) \
            if deployment is not None else None
        stamp = (str(doc["metadata"].get("resourceVersion", "")), replicas)
        cached = self._claims.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        claim = None
        try:
            model = parse_llmmodel({k: v for k, v in doc.items() if k != "status"})
            if model.spec.needs_accelerators:
                # its own Deployment: a model spread over several pods per replica (a
                # LeaderWorkerSet, prefill and decode roles) is not queued
                pod = next(o for o in render(model, self.settings) if o["kind"] ==
                           "Deployment" and o["metadata"]["name"] == model.name
                           )["spec"]["template"]["spec"]
                claim = claim_of(model, pod, running_replicas=replicas)
        except (InvalidModel, RenderError, StopIteration):
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
        return admit(claims, [node_of(n) for n in self.nodes()])

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
