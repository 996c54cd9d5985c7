"""The operator's watch caches by kind and namespace: the reconciler's view of the cluster."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api.v1alpha1 import API_VERSION
from llm_operator.informer import Informer, key_of
from llm_operator.reconcile import workloads

MODEL_KIND = (API_VERSION, "LLMModel")
POD_KIND = ("v1", "Pod")
PREFETCH_POD_KIND = ("v1", "Pod/prefetch")  # a second watch on pods: prefetch-for=<model>
NODE_KIND = ("v1", "Node")
SLICE_KIND = ("resource.k8s.io/v1", "ResourceSlice")


@dataclass
class Caches:
    """The operator's watch caches, by kind and namespace (None: all namespaces).

    Implements the reconciler's ClusterView: reads never reach the API server, and what a
    write returned is stored at once.
    """

    namespaces: list[str | None]
    informers: dict[tuple[str, str], dict[str | None, Informer]] = field(default_factory=dict)

    def add(self, kind: tuple[str, str], make: functools.partial[Informer]) -> None:
        self.informers[kind] = {ns: make(namespace=ns) for ns in self.namespaces}

    def _for(self, kind: tuple[str, str], namespace: str) -> Informer | None:
        by_ns = self.informers.get(kind, {})
        return by_ns.get(namespace) or by_ns.get(None)

    def get(self, kind: tuple[str, str], namespace: str, name: str) -> dict[str, Any] | None:
        informer = self._for(kind, namespace)
        return informer.get(namespace, name) if informer else None

    def workloads(self, namespace: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        """The objects that serve the model now, as (kind, object) (reconcile/workloads)."""
        return [(ref[1], obj) for ref, place in workloads.places(name)
                if (obj := self.get(ref, namespace, place)) is not None]

    def all(self) -> list[Informer]:
        return [i for by_ns in self.informers.values() for i in by_ns.values()]

    def models(self) -> list[dict[str, Any]]:
        return [o for i in self.informers[MODEL_KIND].values() for o in i.objects.values()]

    def model(self, namespace: str, name: str) -> dict[str, Any] | None:
        informer = self._for(MODEL_KIND, namespace)
        return informer.get(namespace, name) if informer else None

    async def child(self, api_version: str, kind: str, namespace: str, name: str
                    ) -> dict[str, Any] | None:
        informer = self._for((api_version, kind), namespace)
        return informer.get(namespace, name) if informer else None

    async def children(self, api_version: str, kind: str, namespace: str,
                       labels: dict[str, str]) -> list[dict[str, Any]] | None:
        informer = self._for((api_version, kind), namespace)
        if informer is None or informer.absent:
            return None
        return informer.select(namespace, labels)

    def serves(self, api_version: str, kind: str) -> bool:
        by_ns = self.informers.get((api_version, kind))
        return not by_ns or not any(i.absent for i in by_ns.values())

    def stored(self, obj: dict[str, Any]) -> None:
        informer = self._for((obj.get("apiVersion", ""), obj.get("kind", "")),
                             key_of(obj)[0])
        if informer is not None:
            informer.store(obj)

    async def nodes(self) -> list[dict[str, Any]] | None:
        """The cluster's nodes, once their watch has synced; None before (or not served)."""
        by_ns = self.informers.get(NODE_KIND)
        informer = by_ns.get(None) if by_ns else None
        if informer is None or informer.absent or not informer.synced.is_set():
            return None
        return list(informer.objects.values())

    def removed(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        informer = self._for((api_version, kind), namespace)
        if informer is not None:
            informer.forget(namespace, name)
