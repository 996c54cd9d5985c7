"""One supervised llama-server process: start, health-check, follow its load, restart, stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from llm_operator.local.llama_server import Load, Meter, failure_reason

log = logging.getLogger("llm_operator.local")

PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Timing:
    """How patiently a process is started, watched and restarted."""

    ready_seconds: float = 300.0  # loading a model can take minutes on a small machine
    poll_seconds: float = 0.2
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    stable_seconds: float = 60.0  # up this long after a restart: the next crash backs off anew
    # llama-server with a request in flight ignores SIGTERM for about a minute; Ctrl-C must
    # leave no process behind within 2 s
    stop_grace: float = 1.5


@dataclass(frozen=True)
class ProcessState:
    """What a supervised process is doing, for tables, status files and the gateway."""

    phase: str  # Starting | Ready | Failed (waiting to restart)
    detail: str = ""
    restarts: int = 0
    pid: int | None = None
    load: Load | None = None  # while Ready: slots, waiting requests, tokens/s


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Ask Linux to SIGKILL the child when `llmop up` dies, even by SIGKILL: no orphans.

    Not SIGTERM: llama-server blocks it in its main thread and, while loading a model or
    with a request in flight, may never act on it; two servers outlived a killed `llmop up`
    so (tests/local/test_cli_up.py, on a loaded machine), SIGTERM pending. A clean stop
    still sends SIGTERM first (``Supervised.stop``).
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Supervised:
    """Run a llama-server ``argv`` until stopped, restarting it with backoff when it dies.

    It counts as Ready once ``{base_url}/health`` answers 200; while Ready its /metrics and
    /slots are read every five ``poll_seconds`` into ``state.load`` (unless not
    ``follow_load``: a router process, whose /metrics and /slots are its members'). Output goes to
    ``log_path``; when the process ends, the reason it gave there is the state's detail.
    ``on_change`` is called after every state change (from the event loop).
    """

    def __init__(self, name: str, argv: Sequence[str], *, base_url: str, log_path: Path,
                 on_change: Callable[[], None], timing: Timing | None = None,
                 env: dict[str, str] | None = None, follow_load: bool = True) -> None:
        self.name, self.argv, self.base_url = name, list(argv), base_url
        self.health_url = f"{base_url}/health"
        self.log_path, self.on_change = log_path, on_change
        self.timing = timing or Timing()
        self.env = env
        self.follow_load = follow_load
        self.state = ProcessState("Starting", "launching")
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.returncode is None \
            else None

    def _set(self, phase: str, detail: str = "") -> None:
        self.state = ProcessState(phase, detail, self.state.restarts, self.pid)
        self.on_change()

    def _reason(self, what: str) -> str:
        """What happened, with llama-server's own reason from its log when it gave one."""
        try:
            with self.log_path.open(errors="replace") as log:
                reason = failure_reason(log.readlines()[-200:])
        except OSError:
            reason = None
        return f"{what}: {reason}" if reason else what

    async def run(self) -> None:
        """Supervise until cancelled; cancelling stops the process (see ``stop``)."""
        delay = self.timing.backoff_initial
        try:
            async with aiohttp.ClientSession() as session:
                while True:
                    started = time.monotonic()
                    code, why = await self._one_run(session)
                    if time.monotonic() - started >= self.timing.stable_seconds:
                        delay = self.timing.backoff_initial
                    self.state = ProcessState(self.state.phase, self.state.detail,
                                              self.state.restarts + 1, None)
                    self._set("Failed", f"{self._reason(why)}; restart in {delay:.0f}s "
                              f"(log: {self.log_path})")
                    log.warning("%s: %s (exit %s); restarting in %.0fs", self.name, why, code,
                                delay)
                    await asyncio.sleep(delay)
                    delay = min(self.timing.backoff_max, delay * 2)
        finally:
            await self.stop()

    async def _one_run(self, session: aiohttp.ClientSession) -> tuple[int | None, str]:
        """Start once and wait until the process ends; (exit code, what happened)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} start: "
                      f"{' '.join(self.argv)}\n".encode())
            out.flush()
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=out,
                    stderr=asyncio.subprocess.STDOUT, start_new_session=True, env=self.env,
                    preexec_fn=_die_with_parent)
            except OSError as exc:
                return None, f"cannot start {self.argv[0]}: {exc.strerror or exc}"
        proc = self._proc
        self._set("Starting", f"loading (pid {proc.pid})")
        exited = asyncio.create_task(proc.wait())
        try:
            healthy = await self._until_healthy(session, exited)
            if healthy:
                self._set("Ready", f"pid {proc.pid}")
                log.info("%s: ready (pid %d)", self.name, proc.pid)
                if self.follow_load:
                    await self._follow_load(session, exited)
                code = await exited
            elif exited.done():
                code = exited.result()
            else:
                log.warning("%s: not healthy after %.0fs; killing it", self.name,
                            self.timing.ready_seconds)
                await self._terminate(proc)
                code = await exited
                return code, f"not ready after {self.timing.ready_seconds:.0f}s"
        finally:
            if not exited.done():
                exited.cancel()
        return code, _exit_text(code)

    async def _until_healthy(self, session: aiohttp.ClientSession,
                             exited: asyncio.Task[int]) -> bool:
        deadline = time.monotonic() + self.timing.ready_seconds
        timeout = aiohttp.ClientTimeout(total=2)
        while time.monotonic() < deadline and not exited.done():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(self.health_url, timeout=timeout) as resp:
                    if resp.status == 200:
                        return True
            await asyncio.wait({exited}, timeout=self.timing.poll_seconds)
        return False

    async def _follow_load(self, session: aiohttp.ClientSession,
                           exited: asyncio.Task[int]) -> None:
        """Until the process exits: its slots, waiting requests and tokens/s (the table)."""
        timeout = aiohttp.ClientTimeout(total=2)
        meter = Meter()
        while not exited.done():
            with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                async with session.get(f"{self.base_url}/metrics", timeout=timeout) as resp:
                    metrics = await resp.text() if resp.status == 200 else ""
                async with session.get(f"{self.base_url}/slots", timeout=timeout) as resp:
                    slots = await resp.json() if resp.status == 200 else None
                load = meter.sample(time.monotonic(), metrics, slots)
                if load != self.state.load:
                    self.state = ProcessState(self.state.phase, self.state.detail,
                                              self.state.restarts, self.pid, load)
                    self.on_change()
            await asyncio.wait({exited}, timeout=self.timing.poll_seconds * 5)

    async def _terminate(self, proc: asyncio.subprocess.Process) -> None:
        """SIGTERM the process group, SIGKILL it after the grace period."""
        if proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), self.timing.stop_grace)
        except TimeoutError:
            log.warning("%s: no exit %.0fs after SIGTERM; SIGKILL", self.name,
                        self.timing.stop_grace)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def stop(self) -> None:
        """Stop the process (idempotent) and wait until it has exited.

        Cancel ``run`` rather than calling this while it runs, or the exit counts as a crash.
        """
        proc = self._proc
        if proc is not None:
            await asyncio.shield(self._terminate(proc))
