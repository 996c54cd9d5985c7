"""What `llmop up` holds per model, and what it reads from the models directory."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, object_label, parse_llmmodel
from llm_operator.local.placement import Decision, LocalServe, RemoteProxy
from llm_operator.local.pool_run import PoolRun
from llm_operator.local.process import Supervised
from llm_operator.mcp_server.sources import DirectoryCache


@dataclass
class Entry:
    """One model as the runtime holds it."""

    decision: Decision
    file: Path
    key: str  # what, when changed, means the model must be started anew
    port: int | None = None
    phase: str = "Pending"
    detail: str = ""
    progress: tuple[int, int | None] | None = None
    model_file: ModelFileStatus | None = None  # what the GGUF header says, once checked
    supervised: Supervised | None = None
    task: asyncio.Task[None] | None = None
    pool: PoolRun | None = None  # the pool serving it, once its file is ready for the pool
    # what the gateway sees of a pool member's requests (``Use``), set by the runtime
    use: Callable[[], Use] | None = None

    @property
    def model(self) -> LLMModel:
        return self.decision.model

    def current(self) -> tuple[str, str, int]:
        """(phase, detail, restarts), from the process (or its pool's) once there is one."""
        if self.pool is not None and (pooled := self.pool.state_of(self.model.spec.model_id)):
            phase, detail, restarts = pooled
            pool = self.model.spec.pool
            if pool is not None and pool.pinned:
                detail = f"{detail}; pinned: never unloaded for another member"
            elif pool is not None and self.use is not None:
                detail += member_note(phase, pool.idle_seconds, self.use(), time.time())
            return phase, detail, restarts
        if self.supervised is not None:
            state = self.supervised.state
            return state.phase, state.detail, state.restarts
        return self.phase, self.detail, 0

    def load(self) -> dict[str, float | int] | None:
        """Slots, busy slots, waiting requests and tokens/s of a model's llama-server."""
        if self.supervised is None or self.supervised.state.load is None:
            return None
        return self.supervised.state.load.as_dict()


class Use(NamedTuple):
    """A pool member's requests, as the gateway sees them."""

    idle: float | None  # seconds since its last answer ended or it was loaded (None: one
    # runs, or neither happened yet)
    busy: bool  # a request of its is at the engine now
    waiting: int = 0  # requests waiting for it to get a place (the gateway's turns)
    place: int = 0  # its place in the pool's line for a place: 1 is next


def member_note(phase: str, idle_seconds: int | None, use: Use, now: float) -> str:
    """What the member's status adds: when it will unload, or its place in line.

    ``now``: the wall clock, for the time an idle member unloads.
    """
    if use.waiting and phase != "Ready":
        place = "next to get a place" if use.place == 1 else f"{_ordinal(use.place)} in line"
        return f"; {use.waiting} request{'s' if use.waiting != 1 else ''} waiting, {place}"
    if phase != "Ready" or idle_seconds is None:
        return ""
    if use.busy:
        return f"; serving (unloads {idle_seconds} s after its last request)"
    if use.idle is None:
        return f"; unloads after {idle_seconds} s without a request (pool.idleSeconds)"
    # times, not a count of seconds: the note stays the same until a request comes
    since = time.strftime("%H:%M:%S", time.localtime(now - use.idle))
    at = time.strftime("%H:%M:%S", time.localtime(now + max(0.0, idle_seconds - use.idle)))
    return (f"; idle since {since}: unloads at about {at} (pool.idleSeconds "
            f"{idle_seconds}) unless a request comes")


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def runtime_key(decision: Decision, file: Path) -> str:
    """The parts that shape the running thing; an edited description restarts nothing."""
    model = decision.model
    if isinstance(decision, LocalServe):
        source = model.spec.model_source.model_dump() if model.spec.model_source else None
        parts: Any = ["serve", model.spec.model_id, decision.server_args("", 0), source,
                      str(file.parent)]
    elif isinstance(decision, RemoteProxy):
        parts = ["proxy", decision.route()]
    else:
        parts = ["none", decision.kind, decision.reason]
    return json.dumps(parts, sort_keys=True, default=str)


class ReadModels(NamedTuple):
    """A directory's models: the valid ones, a line per problem, the named invalid ones."""

    models: list[tuple[LLMModel, Path]]
    problems: list[str]
    invalid: dict[str, tuple[Path, str]]  # name -> (file, its problem line)


def read_models(cache: DirectoryCache) -> ReadModels:
    """What the directory holds now (see ReadModels)."""
    read = ReadModels([], [], {})
    for path, index, raw in cache.entries():
        if isinstance(raw, str):
            read.problems.append(raw)
            continue
        try:
            read.models.append((parse_llmmodel(raw), path))
        except InvalidModel as exc:
            line = f"{path}: {object_label(raw, index)}: {exc}"
            read.problems.append(line)
            name = (raw.get("metadata") or {}).get("name")
            if isinstance(name, str):
                read.invalid[name] = (path, line)
    return read
