"""What `llmop up` holds per model, and what it reads from the models directory."""

from __future__ import annotations

import asyncio
import json
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

    @property
    def model(self) -> LLMModel:
        return self.decision.model

    def current(self) -> tuple[str, str, int]:
        """(phase, detail, restarts), from the process (or its pool's) once there is one."""
        if self.pool is not None and (pooled := self.pool.state_of(self.model.spec.model_id)):
            phase, detail, restarts = pooled
            if self.model.spec.pool is not None and self.model.spec.pool.pinned:
                detail = f"{detail}; pinned: never unloaded for another member"
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
