"""`llmop up`'s pools: a router process per pool; an edited member changes only that member.

Adding, removing or editing a member rewrites the pool's preset and the running router
reads it again: only that member is unloaded or added, the others keep serving. The router
starts anew only when the pool's own settings change (``maxLoaded``) or it is not up yet.
The members it had loaded are written beside the preset, and a router started anew loads
those first (by demand, not by name).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.local.entries import Entry
from llm_operator.local.listening import free_port
from llm_operator.local.placement import LocalServe
from llm_operator.local.pool_run import PoolRun
from llm_operator.local.preparing import Prepared
from llm_operator.local.process import Timing
from llm_operator.local.state import StateDir
from llm_operator.profiles.llama_router import Member
from llm_operator.profiles.pool import against_thrash, sleep_settings

log = logging.getLogger("llm_operator.local")


def pooled(entries: Mapping[str, Entry]) -> dict[str, list[Entry]]:
    """The served members of each pool (namespace/pool), in name order."""
    found: dict[str, list[Entry]] = {}
    for _, entry in sorted(entries.items()):
        pool = entry.model.spec.pool
        if isinstance(entry.decision, LocalServe) and pool is not None:
            found.setdefault(f"{entry.model.namespace}/{pool.name}", []).append(entry)
    return found


def file_name(run: PoolRun) -> str:
    """The pool's files' name: namespace and pool, "_" between (no DNS label has one)."""
    return run.label.replace("/", "_")


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
        self._members: dict[str, list[Entry]] = {}  # each pool's members now, by pool

    async def sync(self, entries: Mapping[str, Entry]) -> None:
        """One router per pool, its members as the files say.

        A member's change reaches the running router; a change of the pool's own settings,
        or one while its router is not up yet, starts the router anew.
        """
        wanted = pooled(entries)
        for label, members in wanted.items():
            pool = members[0].model.spec.pool
            assert pool is not None
            restart_key = json.dumps([pool.max_loaded])
            key = json.dumps([restart_key, [(e.model.name, e.key) for e in members]])
            running = self.runs.get(label)
            self._members[label] = members
            if running is not None and running.key == key:
                continue
            if running is not None and running.restart_key == restart_key \
                    and running.serving():
                running.key = key
                for entry in members:
                    entry.port = running.port
                if running.editing is not None:  # the newest preset is the whole truth
                    running.editing.cancel()
                running.editing = asyncio.create_task(self._edit(running, members),
                                                      name=f"pool {label}: edit")
                log.info("pool %s: now %s", label, ", ".join(e.model.name for e in members))
                continue
            if running is not None:
                await self.stop(label)
            run = PoolRun(label, key, restart_key, free_port(), pool.max_loaded,
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
        self._members.pop(label, None)
        tasks = {t for t in (run.editing, run.task) if t is not None}
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def stop_all(self) -> None:
        for label in list(self.runs):
            await self.stop(label)

    def _member(self, entry: Entry, prepared: Prepared, load_on_startup: bool) -> Member:
        decision = entry.decision
        return Member(entry.model.spec.model_id, str(prepared.path),
                      decision.server_args(str(prepared.path), 0)
                      if isinstance(decision, LocalServe) else [], load_on_startup)

    def _demand_file(self, run: PoolRun) -> Path:
        """Where the members the router had loaded are kept, beside the pool's preset."""
        return self.state.root / "pools" / f"{file_name(run)}.loaded.json"

    def _demanded(self, run: PoolRun) -> list[str]:
        """The modelIds loaded when the pool's router last ran, if it was recorded."""
        with contextlib.suppress(OSError, ValueError):
            found = json.loads(self._demand_file(run).read_text(encoding="utf-8"))
            if isinstance(found, list):
                return [str(m) for m in found]
        return []

    def _record_demand(self, run: PoolRun) -> None:
        loaded = sorted(run.loaded())
        if loaded:  # an empty list is a router starting or stopping, not a demand
            path = self._demand_file(run)
            with contextlib.suppress(OSError):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(loaded), encoding="utf-8")

    async def _serve(self, run: PoolRun, members: list[Entry]) -> None:
        """Ready every member's file, then keep the pool's router running."""
        def refresh() -> None:
            self._record_demand(run)
            for entry in self._members.get(run.label, []):  # an edit may change them
                if entry.pool is run:
                    self.refresh(entry)

        prepared = await asyncio.gather(*(self.prepare(e) for e in members))
        ready = [(e, p) for e, p in zip(members, prepared, strict=True) if p is not None]
        if not ready:
            return  # each member says why (prepare)
        for entry, _ in ready:
            entry.pool = run
        # pinned members load first, then those loaded when it last ran, else the first by
        # name
        pinned = [e.model.spec.model_id for e, _ in ready
                  if e.model.spec.pool is not None and e.model.spec.pool.pinned]
        demanded = [m for m in self._demanded(run) if m in run.members]
        others = demanded or [e.model.spec.model_id for e, _ in ready]
        first = list(dict.fromkeys([*pinned, *others]))[:run.max_loaded]
        run.prepared = {e.model.name: self._member(e, p, e.model.spec.model_id in first)
                        for e, p in ready}
        run.notes = lambda: [e.current()[1] for e in self._members.get(run.label, [])
                             if e.pool is run]
        name = file_name(run)
        await run.run(ready[0][1].binary, list(run.prepared.values()),
                      preset=self.state.root / "pools" / f"{name}.ini",
                      log_path=self.state.model_log(name), on_change=refresh,
                      timing=self.timing, env=self.env())

    async def _edit(self, run: PoolRun, members: Sequence[Entry]) -> None:
        """A member added, removed or edited: the preset written anew, the router told.

        A member still in the pool keeps the section it was loaded with; a new or edited
        one (a new entry) is readied first and says so in its phase meanwhile.
        """
        fresh = [e for e in members if e.pool is not run]
        prepared = await asyncio.gather(*(self.prepare(e) for e in fresh))
        ready = dict(zip((e.model.name for e in fresh), prepared, strict=True))
        sections: dict[str, Member] = {}
        for entry in members:
            if entry.pool is run and entry.model.name in run.prepared:
                sections[entry.model.name] = run.prepared[entry.model.name]
            elif (found := ready.get(entry.model.name)) is not None:
                sections[entry.model.name] = self._member(entry, found, False)
        try:
            run.write(list(sections.values()))
        except ValueError as exc:  # a value the INI cannot hold: the router keeps the old
            log.error("pool %s: %s", run.label, exc)
            run.key = ""  # the next change of the files tries again
            for entry in fresh:
                entry.phase, entry.detail = "Failed", f"not in pool {run.label}'s preset: {exc}"
                self.refresh(entry)
            return
        try:
            await run.reload()
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            # the preset is written; the router reads it as it starts again
            log.warning("pool %s: the router did not reload its preset (%s): starting it "
                        "again", run.label, exc)
            run.restart()
        run.prepared = sections
        self._record_demand(run)
        for entry in fresh:
            if entry.model.name in sections:
                entry.pool = run
        for entry in members:
            self.refresh(entry)


def sleep_group(model: LLMModel, pinning: set[str]) -> dict[str, Any] | None:
    """A pool member's sleep group, where its pool limits swaps or pins a member.

    Its router's members then take turns under the gateway's policy (minimum residency,
    swap budget, pinned members), not the router's own least recently used. ``pinning``:
    the pools (namespace/pool) with a pinned member.
    """
    pool = model.spec.pool
    if pool is None:
        return None
    label = f"{model.namespace}/{pool.name}"
    if not against_thrash(pool) and label not in pinning:
        return None
    return sleep_settings(pool, f"pool {label}", pool.max_loaded, "llama-router")
