"""What the console's pages show of each model, from what its source knows: no I/O here.

A source (``Source``) is `llmop up`'s runtime or the router's watch of the cluster: it
names each model's state (``ModelState``), and the console adds the planner's verdict,
the objects the model becomes and the history of its states.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from llm_operator.access.keyring import ClientKey
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.planner import Plan, plan


@dataclass(frozen=True)
class Condition:
    """One condition, as Kubernetes writes them (``llmop up``: its phase, as one)."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class ModelState:
    """What a source says of one model now."""

    model: LLMModel
    phase: str  # Ready, Pending, Failed, Standby, Proxying, ...
    detail: str  # why, in plain words
    ready: int  # replicas answering
    desired: int
    route: str | None  # the gateway's route label: its figures in the registry
    where: str = "-"  # where it runs: a process and port, a Deployment, an upstream
    conditions: tuple[Condition, ...] = ()
    members_loaded: tuple[str, ...] | None = None  # a pool's members loaded (pools only)
    objects: tuple[tuple[str, str], ...] = ()  # (kind, name) of what it became
    names: tuple[str, ...] = ()  # what clients reach it by, as the gateway routes them


@dataclass(frozen=True)
class Visitor:
    """Who looks, and what they may see.

    ``owner`` is the client key's id ("" where the gateway has none); ``sees`` says which
    models it may see (in the router, those whose names the gateway gives it may use).
    """

    owner: str
    sees: Callable[[ModelState], bool]
    key: ClientKey | None = None  # the visitor's own key, where the gateway has keys
    admin: bool = False  # the admin token, or an --oidc-admin: every model, every key
    person: str = ""  # signed in with OpenID Connect: their name (an email, a username)

    @property
    def signed_in(self) -> bool:
        return bool(self.owner) or self.admin or bool(self.person)


EVERYONE = Visitor("", lambda _: True)
ADMIN = Visitor("", lambda _: True, admin=True)


class Source(Protocol):
    """Where the console reads models: `llmop up`'s runtime or the router's informer."""

    def states(self) -> Sequence[ModelState]: ...


@dataclass(frozen=True)
class Change:
    """A model's phase or reason as it changed, seen by the console."""

    at: float
    phase: str
    detail: str


@dataclass
class History:
    """Each model's recent changes, from readings of its source (the newest last)."""

    keep: int = 20
    changes: dict[str, deque[Change]] = field(default_factory=dict)

    def add(self, at: float, states: Sequence[ModelState]) -> None:
        now = {key_of(s.model) for s in states}
        for gone in [k for k in self.changes if k not in now]:  # deleted: forgotten
            del self.changes[gone]
        for state in states:
            key = key_of(state.model)
            series = self.changes.setdefault(key, deque(maxlen=self.keep))
            if not series or (series[-1].phase, series[-1].detail) != (state.phase,
                                                                        state.detail):
                series.append(Change(at, state.phase, state.detail))

    def of(self, model: LLMModel) -> list[Change]:
        return list(self.changes.get(key_of(model), ()))


def key_of(model: LLMModel) -> str:
    return f"{model.namespace}/{model.name}"


def engine_of(model: LLMModel) -> str:
    spec = model.spec
    return "remote" if spec.is_remote else spec.inference_engine


def verdict_of(model: LLMModel) -> Plan:
    """The planner's plan, as `llmop plan` shows it."""
    return plan(model)


def plan_rows(found: Plan) -> list[tuple[str, str]]:
    """The plan as (what, value) rows, the memory estimate's parts first."""
    data = found.to_dict()
    rows = [
        ("Verdict", f"{found.verdict}: {found.reason}"),
        ("Memory estimate", f"{data['estimatedMemoryGiB']} GiB (weights {data['weightsGiB']}, "
                            f"KV cache {data['kvCacheGiB']}, overhead {data['overheadGiB']})"),
        ("Context", f"{data['contextTokens']:,} tokens"),
        ("Accelerator", f"{data['accelerator'] or '-'} x {data['acceleratorCount']}"),
        ("Tensor parallel", str(data["tensorParallelSize"])),
        ("Nodes", str(data["nodes"])),
        ("Host KV tier", f"{data['hostKvCacheMiB']} MiB" if data["hostKvCacheMiB"] else "-"),
    ]
    if data["capacityGiB"] is not None:
        rows.insert(2, ("Capacity", f"{data['capacityGiB']} GiB"))
    return rows


def plain_words(state: ModelState) -> str:
    """Why a model is not serving, in a sentence, or what it is doing (its phase aside)."""
    failing = [c for c in state.conditions if c.status != "True" and c.reason]
    if state.phase not in ("Ready", "Proxying") and failing:
        first = failing[0]
        return f"{first.reason}: {first.message}" if first.message else first.reason
    return state.detail or "-"


def spec_document(model: LLMModel) -> dict[str, Any]:
    """The model as its manifest says it (names of Secrets, never their values)."""
    return model.model_dump(mode="json", by_alias=True, exclude_none=True,
                            include={"api_version", "kind", "metadata", "spec"})
