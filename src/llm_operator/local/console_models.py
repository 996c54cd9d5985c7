"""`llmop up`'s models as the web console shows them (console.views.ModelState)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from llm_operator.console.views import ModelState
from llm_operator.local.entries import Entry
from llm_operator.local.placement import LocalServe, RemoteProxy

ANSWERING = frozenset({"Ready", "Proxying"})


def where_of(entry: Entry) -> str:
    """Where a model runs on this machine: its process and port, or its upstream."""
    decision = entry.decision
    if isinstance(decision, LocalServe) and entry.pool is not None:
        return f"llama-server :{entry.port} (pool {entry.pool.label})"
    if isinstance(decision, LocalServe):
        return f"llama-server :{entry.port}"
    if isinstance(decision, RemoteProxy):
        return str(decision.route()["upstream"]["baseUrl"])
    return "-"


def state_of(entry: Entry, route: str | None) -> ModelState:
    phase, detail, _ = entry.current()
    served = isinstance(entry.decision, (LocalServe, RemoteProxy))
    return ModelState(
        model=entry.model, phase=phase, detail=detail,
        ready=1 if phase in ANSWERING else 0, desired=1 if served else 0, route=route,
        where=where_of(entry),
        members_loaded=tuple(entry.pool.loaded()) if entry.pool is not None else None)


class LocalModels:
    """The console's source on `llmop up`: the runtime's entries and their routes."""

    def __init__(self, entries: Callable[[], Mapping[str, Entry]],
                 labels: Callable[[], Mapping[tuple[str, str], list[str]]]) -> None:
        self._entries, self._labels = entries, labels

    def states(self) -> Sequence[ModelState]:
        labels = self._labels()
        return [state_of(e, next(iter(labels.get((e.model.namespace, e.model.name), ())),
                                 None))
                for e in self._entries().values()]
