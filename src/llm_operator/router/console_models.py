"""The cluster's models as the web console shows them: each LLMModel's status, read as it is."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from llm_operator.access.keyring import Keyring
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.console.views import EVERYONE, Condition, ModelState, Visitor

Key = tuple[str, str]


def state_of(model: LLMModel, status: Mapping[str, Any], route: str | None,
             names: Sequence[str] = ()) -> ModelState:
    """What the operator wrote in the model's status, as the console shows it."""
    conditions = tuple(
        Condition(str(c.get("type", "")), str(c.get("status", "")), str(c.get("reason", "")),
                  str(c.get("message", "")))
        for c in status.get("conditions") or () if isinstance(c, Mapping))
    ready = next((c for c in conditions if c.type == "Ready"), None)
    where = status.get("endpoint") or "-"
    return ModelState(
        model=model, phase=str(status.get("phase") or "Pending"),
        detail=ready.message if ready is not None else "",
        ready=int(status.get("currentReplicas") or 0),
        desired=int(status.get("desiredReplicas") or 0), route=route, where=str(where),
        conditions=conditions, names=tuple(names))


class ClusterModels:
    """The console's source in the router: the LLMModels its informers hold.

    A model is parsed again only when its resourceVersion changes; one the API types refuse
    is left out (the router does not route it either).
    """

    def __init__(self, objects: Callable[[], Iterable[Mapping[str, Any]]],
                 labels: Callable[[], Mapping[Key, list[str]]],
                 names: Callable[[], Mapping[Key, list[str]]] = dict) -> None:
        self._objects, self._labels, self._names = objects, labels, names
        self._parsed: dict[Key, tuple[str, LLMModel | None]] = {}

    def _model(self, obj: Mapping[str, Any]) -> LLMModel | None:
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace")), str(meta.get("name")))
        version = str(meta.get("resourceVersion"))
        known = self._parsed.get(key)
        if known is not None and known[0] == version:
            return known[1]
        try:
            model: LLMModel | None = parse_llmmodel(dict(obj))
        except InvalidModel:
            model = None
        self._parsed[key] = (version, model)
        return model

    def states(self) -> Sequence[ModelState]:
        labels, names, out, seen = self._labels(), self._names(), [], set()
        for obj in self._objects():
            model = self._model(obj)
            if model is None:
                continue
            key = (model.namespace, model.name)
            seen.add(key)
            out.append(state_of(model, obj.get("status") or {},
                                next(iter(labels.get(key, ())), None), names.get(key, ())))
        for gone in set(self._parsed) - seen:
            del self._parsed[gone]
        return out


def key_viewer(keyring: Callable[[], Keyring | None]) -> Callable[[str | None], Visitor | None]:
    """Who may look: with client keys, a valid key, seeing the models it may reach.

    Without client keys (``keyring`` answers None) the console is as open as the gateway.
    """
    def viewer(given: str | None) -> Visitor | None:
        ring = keyring()
        if ring is None:
            return EVERYONE
        key = ring.find(given) if given else None
        if key is None:
            return None
        # the names the gateway gives the model, not every name it could have: a key
        # allowed a name another model took first sees that model only
        return Visitor(key.id, lambda state: any(key.may_use(n) for n in state.names), key)
    return viewer
