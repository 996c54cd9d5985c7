"""`llmop up`'s pools: a router process per pool, started anew when its members change."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from llm_operator.local.entries import Entry
from llm_operator.local.listening import free_port
from llm_operator.local.placement import LocalServe
from llm_operator.local.pool_run import PoolRun
from llm_operator.local.preparing import Prepared
from llm_operator.local.process import Timing
from llm_operator.local.state import StateDir
from llm_operator.profiles.llama_router import Member

log = logging.getLogger("llm_operator.local")


def pooled(entries: Mapping[str, Entry]) -> dict[str, list[Entry]]:
    """The served members of each pool (namespace/pool), in name order."""
    found: dict[str, list[Entry]] = {}
    for _, entry in sorted(entries.items()):
        pool = entry.model.spec.pool
        if isinstance(entry.decision, LocalServe) and pool is not None:
            found.setdefault(f"{entry.model.namespace}/{pool.name}", []).append(entry)
    return found


@dataclass
class Pools:
    """Every pool's router on this machine (PoolRun), as the runtime's entries want them.

    ``prepare`` readies a member's files (saying why not in its phase), ``refresh`` follows
    a member's new state (the gateway, the state files), ``env`` is the engines'
    environment.
    """

    state: StateDir
    timing: Timing
    prepare: Callable[[Entry], Awaitable[Prepared | None]]
    refresh: Callable[[Entry], None]
    env: Callable[[], dict[str, str]]

    def __post_init__(self) -> None:
        self.runs: dict[str, PoolRun] = {}

    async def sync(self, entries: Mapping[str, Entry]) -> None:
        """One router per pool; a pool whose members or settings changed starts anew."""
        wanted = pooled(entries)
        for label, members in wanted.items():
            pool = members[0].model.spec.pool
            assert pool is not None
            key = json.dumps([pool.max_loaded, [(e.model.name, e.key) for e in members]])
            running = self.runs.get(label)
            if running is not None and running.key == key:
                continue
            if running is not None:
                await self.stop(label)
            run = PoolRun(label, key, free_port(), pool.max_loaded,
                          [e.model.spec.model_id for e in members])
            self.runs[label] = run
            for entry in members:  # its own phase (Starting) until the new router runs
                entry.port, entry.pool = run.port, None
            run.task = asyncio.create_task(self._serve(run, members),
                                           name=f"pool {label}")
            log.info("pool %s: serving %s", label, ", ".join(e.model.name for e in members))
        for label in [p for p in self.runs if p not in wanted]:
            await self.stop(label)

    async def stop(self, label: str) -> None:
        run = self.runs.pop(label)
        if run.task is not None:
            run.task.cancel()
            await asyncio.wait({run.task})

    async def stop_all(self) -> None:
        for label in list(self.runs):
            await self.stop(label)

    async def _serve(self, run: PoolRun, members: list[Entry]) -> None:
        """Ready every member's file, then keep the pool's router running."""
        def refresh() -> None:
            for entry in members:
                self.refresh(entry)

        prepared = await asyncio.gather(*(self.prepare(e) for e in members))
        ready = [(e, p) for e, p in zip(members, prepared, strict=True) if p is not None]
        if not ready:
            return  # each member says why (prepare)
        for entry, _ in ready:
            entry.pool = run
        file_name = run.label.replace("/", "-")
        await run.run(ready[0][1].binary, [
            Member(e.model.spec.model_id, str(p.path),
                   e.decision.server_args(str(p.path), 0)
                   if isinstance(e.decision, LocalServe) else [], i < run.max_loaded)
            for i, (e, p) in enumerate(ready)],
            preset=self.state.root / "pools" / f"{file_name}.ini",
            log_path=self.state.model_log(file_name), on_change=refresh,
            timing=self.timing, env=self.env())
