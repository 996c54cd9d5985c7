"""A pool on this machine: one llama-server in router mode, its members' states from /models.

The preset file is the pool's truth: written before the router starts, and rewritten when
a member is added, removed or edited, after which the router re-reads it (``reload``) and
unloads only the members whose section changed; the others keep serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from llm_operator.local.placement import LOOPBACK
from llm_operator.local.process import Supervised, Timing
from llm_operator.profiles.llama_router import Member, load_error, models_preset, router_args

LOG_TAIL_BYTES = 256 * 1024  # where a member's last start and its errors are
# A reload waits for the router to unload the edited members: their requests finish first.
RELOAD_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True)
class MemberState:
    """What the pool's router says of one member."""

    phase: str  # Ready (loaded) | Loading | Standby (loads on its next request) | Failed
    detail: str


def member_states(body: Any, pool: str, max_loaded: int, members: int,
                  why: Callable[[str], str | None] = lambda _: None
                  ) -> dict[str, MemberState]:
    """Each member's state, by modelId, from the router's ``GET /models`` answer.

    ``why``: the engine's reason a member failed to load (from the router's log), if said.
    """
    out: dict[str, MemberState] = {}
    for item in (body or {}).get("data") or []:
        status = item.get("status") or {}
        value = status.get("value")
        if value == "loaded":
            state = MemberState("Ready", "loaded")
        elif value in ("loading", "downloading"):
            state = MemberState("Loading", "loading (requests wait for it)")
        elif status.get("failed") and (reason := why(str(item.get("id")))):
            # refused at the gateway with this, not loaded again per request: fix the file
            # or the flags, and the edit starts the pool anew
            state = MemberState("Failed", f"the engine could not load it: {reason}")
        elif status.get("failed"):
            # no error of the engine's: its load was stopped (the router made room for
            # another member while it loaded, say), and loading it again may well work
            state = MemberState("Standby", f"its last load ended before it finished (exit "
                                f"code {status.get('exit_code')}, no error in pool {pool}'s "
                                "log): its next request loads it")
        elif value == "sleeping":  # pool.idleSeconds passed without a request
            state = MemberState("Standby", "asleep after its idle time (pool.idleSeconds): "
                                "its weights are unloaded, its next request wakes it")
        else:  # unloaded
            state = MemberState("Standby", f"not loaded: its next request loads it (at most "
                                f"{max_loaded} of the pool's {members} at once)")
        out[str(item.get("id"))] = state
    return out


@dataclass
class PoolRun:
    """One pool's router process and what it says of each member."""

    label: str  # namespace/pool
    key: str  # its members and settings: when changed, the preset is written again
    restart_key: str  # what, when changed, means the router itself must be started anew
    port: int
    max_loaded: int
    members: list[str]  # the members' modelIds
    states: dict[str, MemberState] = field(default_factory=dict)
    supervised: Supervised | None = None
    task: asyncio.Task[None] | None = None
    editing: asyncio.Task[None] | None = None  # the latest edit's preset being applied
    prepared: dict[str, Member] = field(default_factory=dict)  # by the member's name
    log_path: Path | None = None  # the router's, its members' lines in it
    preset: Path | None = None
    # what else the members' status says (when an idle one unloads, a waiting one's place
    # in line): read with the states, a change of it is a change too
    notes: Callable[[], object] = lambda: None
    # when each member was last found loaded (time.monotonic): idle counts from then too
    ready_since: dict[str, float] = field(default_factory=dict)

    def serving(self) -> bool:
        """Whether the router is up, so that an edit can reach it without a restart."""
        return self.supervised is not None and self.supervised.state.phase == "Ready"

    def loaded(self) -> list[str]:
        """The modelIds the router has loaded now, as last read."""
        return [m for m, state in self.states.items() if state.phase == "Ready"]

    def state_of(self, model_id: str) -> tuple[str, str, int] | None:
        """(phase, detail, restarts) of a member once the router runs, else None."""
        if self.supervised is None:
            return None
        process = self.supervised.state
        if process.phase != "Ready":
            return process.phase, f"pool {self.label}: {process.detail}", process.restarts
        state = self.states.get(model_id)
        if state is None:
            return "Starting", f"pool {self.label}: listing its members", process.restarts
        return state.phase, state.detail, process.restarts

    async def run(self, binary: Path, prepared: Sequence[Member], *, preset: Path,
                  log_path: Path, on_change: Callable[[], None], timing: Timing,
                  env: dict[str, str]) -> None:
        """Write the preset, then keep the router running and its members' states read."""
        self.preset, self.log_path = preset, log_path
        self.write(prepared)
        argv = [str(binary), *router_args(LOOPBACK, self.port, str(preset), self.max_loaded)]
        self.supervised = Supervised(self.label, argv, base_url=f"http://{LOOPBACK}:{self.port}",
                                     log_path=log_path, on_change=on_change, timing=timing,
                                     env=env, follow_load=False)
        watching = asyncio.create_task(self._watch(on_change, timing.poll_seconds * 5))
        try:
            await self.supervised.run()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching

    def write(self, members: Sequence[Member]) -> None:
        """The preset file, with ``members``. ValueError if a value cannot be written."""
        assert self.preset is not None
        self.preset.parent.mkdir(parents=True, exist_ok=True)
        written = self.preset.with_suffix(".tmp")
        written.write_text(models_preset(members), encoding="utf-8")
        written.replace(self.preset)  # never half a file, should the router read it now
        self.members = [m.model_id for m in members]

    async def reload(self) -> None:
        """The preset read again by the running router (``write`` it first).

        The router unloads a member whose section changed or went, adds a new one (loaded
        by its first request) and leaves the others as they are, their requests included.
        Should the router be down meanwhile, it reads the new preset when it starts again.
        """
        async with aiohttp.ClientSession() as session, session.get(
                f"http://{LOOPBACK}:{self.port}/models", params={"reload": "1"},
                timeout=aiohttp.ClientTimeout(total=RELOAD_TIMEOUT_SECONDS)) as resp:
            if resp.status != 200:
                raise aiohttp.ClientResponseError(resp.request_info, (), status=resp.status,
                                                  message=(await resp.text())[:300])
            body = await resp.json()
        self.states = member_states(body, self.label, self.max_loaded, len(self.members),
                                    self._load_error)

    def restart(self) -> None:
        """Stop the router's process: it is started again (Supervised) with the preset."""
        pid = self.supervised.pid if self.supervised is not None else None
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _load_error(self, model_id: str) -> str | None:
        """The engine's words for the member's failed load, from the end of the pool's log."""
        if self.log_path is None:
            return None
        try:
            with self.log_path.open("rb") as log:
                log.seek(max(0, log.seek(0, 2) - LOG_TAIL_BYTES))
                tail = log.read().decode("utf-8", "replace")
        except OSError:
            return None
        return load_error(tail, model_id)

    async def _watch(self, on_change: Callable[[], None], every: float) -> None:
        """While the router is up: its /models, the members' states."""
        assert self.supervised is not None
        timeout = aiohttp.ClientTimeout(total=2)
        noted = self.notes()
        async with aiohttp.ClientSession() as session:
            while True:
                if self.supervised.state.phase == "Ready":
                    with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                        async with session.get(f"http://{LOOPBACK}:{self.port}/models",
                                               timeout=timeout) as resp:
                            body = await resp.json() if resp.status == 200 else None
                        states = member_states(body, self.label, self.max_loaded,
                                               len(self.members), self._load_error)
                        if states != self.states:
                            now = time.monotonic()
                            for model_id, state in states.items():
                                before = self.states.get(model_id)
                                if state.phase == "Ready" and (
                                        before is None or before.phase != "Ready"):
                                    self.ready_since[model_id] = now
                            self.states = states
                            on_change()
                notes = self.notes()
                if notes != noted:
                    noted = notes
                    on_change()
                await asyncio.sleep(every)

