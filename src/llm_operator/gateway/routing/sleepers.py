"""Engines that take turns on one accelerator (vLLM's sleep mode): who is awake, who sleeps next.

A sleep group's engines share one accelerator that holds ``max_awake`` of them with their
KV caches. A request for an engine asleep waits while the group makes room: the least
recently used awake engine with nothing in flight is put to sleep (vLLM's level 1: its
weights to host memory, its KV cache dropped), then the engine asked for is woken. One
change at a time per group, so the accelerator never holds more than ``max_awake``; a
request for an awake engine costs a lookup. The engines' own word (``GET /is_sleeping``)
is read whenever this process does not know (at its start, after a failed change), so an
engine left awake by another process is counted.

Against thrash, a group may keep each woken engine awake ``min_awake`` seconds before it
may be put to sleep, and wake at most ``max_wakes`` engines per ``WAKE_WINDOW_SECONDS``: a
request for an engine asleep then waits (counted in ``Engine.waiting``) instead of making
the engines swap on every request. The same groups hold a llama-server router's members
(gateway/routing/llama_router_control.py), keyed by ``engine_key``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import aiohttp

from llm_operator.gateway.settings.config import Route

State = Literal["awake", "draining", "changing", "asleep", "unknown"]
# what GET /models says of an engine, in llama-server's router mode's words
Loaded = Literal["loaded", "loading", "unloaded", "failed", "unknown"]
CONTROL_SECONDS = 600.0  # a wake of a large model from host memory, or a sleep, takes long
WAKE_WINDOW_SECONDS = 60.0  # max_wakes counts the wakes of the last minute


class SleepError(Exception):
    """An engine could not be put to sleep, woken or asked: what to tell the client."""


class EngineControl(Protocol):
    """What the group asks an engine (by its base URL, OpenAI's, ending /v1)."""

    async def sleep(self, base_url: str) -> None: ...

    async def wake(self, base_url: str) -> None: ...

    async def sleeping(self, base_url: str) -> bool: ...


@dataclass
class Engine:
    """One engine of a group: its state, requests in flight, when it was last used."""

    url: str
    state: State = "unknown"
    in_use: int = 0
    used: int = 0  # the group's tick at its last request
    waking: bool = False  # while "changing": to awake (else to asleep)
    failed: bool = False  # its last wake failed (until a change succeeds)
    failure: str = ""  # why, as the gateway told the client
    awake_since: float = 0.0  # the group's clock when it was last woken or found awake
    waiting: int = 0  # requests waiting for it to be woken
    tickets: list[int] = field(default_factory=list)  # theirs, in the group's count
    pinned: bool = False  # never put to sleep for another

    @property
    def loaded(self) -> Loaded:
        """Its state as llama-server's router reports a member's (the operator reads both)."""
        if self.state in ("awake", "draining"):
            return "loaded"
        if self.state == "changing":
            return "loading" if self.waking else "unloaded"
        if self.failed:
            return "failed"
        return "unloaded" if self.state == "asleep" else "unknown"


@dataclass
class SleepGroup:
    """The engines of one group and the one change at a time between them."""

    name: str
    max_awake: int
    control: EngineControl
    engines: dict[str, Engine] = field(default_factory=dict)
    changes: Callable[[str, str], None] = lambda action, outcome: None  # counted
    min_awake: float = 0.0  # seconds a woken engine stays awake before it may sleep
    max_wakes: int | None = None  # wakes per WAKE_WINDOW_SECONDS (None: no budget)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    tick: int = 0
    queued: int = 0  # requests that began to wait, counted: each one's ticket
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _freed: asyncio.Event = field(default_factory=asyncio.Event)
    _wakes: deque[float] = field(default_factory=deque)

    def enter_now(self, url: str) -> bool:
        """Count a request into an awake engine without waiting; False: ``enter`` must."""
        engine = self.engines[url]
        if engine.state != "awake":
            return False
        self._use(engine)
        return True

    async def enter(self, url: str) -> None:
        """The engine awake with this request counted in it (SleepError: it cannot be)."""
        engine = self.engines[url]
        self.queued += 1
        ticket = self.queued
        engine.tickets.append(ticket)
        engine.waiting += 1
        try:
            async with self._lock:  # one change at a time
                await self._learn()
                if engine.state != "awake":
                    await self._within_budget()
                    await self._make_room(engine)
                    if self.max_wakes is not None:  # a failed wake counts too
                        self._wakes.append(self.clock())
                    await self._change(engine, "wake", self.control.wake, "awake")
                self._use(engine)
        finally:
            engine.waiting -= 1
            engine.tickets.remove(ticket)

    def line(self, url: str) -> tuple[int, int]:
        """(requests waiting for the engine at ``url``, its place in the group's line).

        The place among the engines that requests wait for, by the earliest of their
        requests still waiting (the group's changes are made in that order): 1 is next, 0
        when none waits.
        """
        engine = self.engines.get(url)
        if engine is None or not engine.tickets:
            return 0, 0
        first = engine.tickets[0]
        ahead = sum(1 for e in self.engines.values()
                    if e.tickets and e is not engine and e.tickets[0] < first)
        return len(engine.tickets), ahead + 1

    async def _within_budget(self) -> None:
        """Until a wake fits the group's budget: the oldest counted leaves the window."""
        while self.max_wakes is not None:
            now = self.clock()
            while self._wakes and now - self._wakes[0] >= WAKE_WINDOW_SECONDS:
                self._wakes.popleft()
            if len(self._wakes) < self.max_wakes:
                return
            await self.sleep(self._wakes[0] + WAKE_WINDOW_SECONDS - now)

    async def _change(self, engine: Engine, action: str,
                      call: Callable[[str], Awaitable[None]], to: State) -> None:
        """Put ``engine`` to sleep or wake it; counted.

        An engine whose change failed or was given up (the request that asked left) is
        "unknown" until asked again: it may have changed anyway.
        """
        engine.state, engine.waking = "changing", to == "awake"  # no request enters it
        try:
            await call(engine.url)
        except SleepError as exc:  # a failed wake is the engine's to report (GET /models)
            engine.state, engine.failed = "unknown", engine.waking
            if engine.waking:
                engine.failure = str(exc)
            self.changes(action, "failed")
            raise
        except BaseException:
            engine.state = "unknown"
            raise
        engine.state, engine.failed = to, False
        if to == "awake":
            engine.awake_since = self.clock()
        self.changes(action, "ok")

    def leave(self, url: str) -> None:
        """A request the engine served has ended."""
        engine = self.engines.get(url)
        if engine is not None and engine.in_use:
            engine.in_use -= 1
            if not engine.in_use:
                self._freed.set()

    def _use(self, engine: Engine) -> None:
        self.tick += 1
        engine.used, engine.in_use = self.tick, engine.in_use + 1

    async def refresh(self) -> None:
        """Ask the engines whose state is not known, unless a change is under way.

        For a report (GET /models): it never waits behind a change, and an engine that
        does not answer stays unknown.
        """
        if self._lock.locked() or all(e.state != "unknown" for e in self.engines.values()):
            return
        async with self._lock:
            with contextlib.suppress(SleepError):  # reported as it stands: unknown, failed
                await self._learn()

    async def _learn(self) -> None:
        """Ask the engines whose state is not known (at start, after a failed change)."""
        unknown = [e for e in self.engines.values() if e.state == "unknown"]
        answers = await asyncio.gather(*(self.control.sleeping(e.url) for e in unknown),
                                       return_exceptions=True)
        for engine, answer in zip(unknown, answers, strict=True):
            if isinstance(answer, BaseException):
                raise answer
            engine.state = "asleep" if answer else "awake"
            engine.awake_since = self.clock()  # found awake: its residency counts from now

    async def _make_room(self, target: Engine) -> None:
        """Put the least recently used engines to sleep until ``target`` fits.

        Only an engine awake for ``min_awake`` seconds, and not pinned, may sleep: until
        one is, the request waits. An idle one first; when every such engine serves, the
        least recently used takes no new request (draining) and sleeps once its last one
        ends, so that a steady stream to the others cannot keep ``target`` waiting for
        ever; an idle engine that comes of age meanwhile sleeps instead, and whichever
        engine was draining but did not sleep takes requests again.
        """
        try:
            while True:
                awake = [e for e in self.engines.values()
                         if e.state in ("awake", "draining") and e is not target]
                if len(awake) < self.max_awake:
                    return
                now = self.clock()
                movable = [e for e in awake if not e.pinned]
                if not movable:
                    raise SleepError(f"every place of group {self.name} is held by a "
                                     "pinned engine")
                settled = [e for e in movable if now - e.awake_since >= self.min_awake]
                # when the next engine not settled yet comes of age, if one does
                coming = min((e.awake_since + self.min_awake - now
                              for e in movable if e not in settled), default=None)
                if not settled:  # every one woke lately: wait for the first to have its time
                    assert coming is not None
                    await self.sleep(coming)
                    continue
                idle = [e for e in settled if not e.in_use]
                if not idle:
                    victim = next((e for e in settled if e.state == "draining"), None) or \
                        min(settled, key=lambda e: e.used)
                    victim.state = "draining"
                    self._freed.clear()
                    await self._freed_or(coming)
                    continue
                victim = min(idle, key=lambda e: e.used)
                try:
                    await self._change(victim, "sleep", self.control.sleep, "asleep")
                except SleepError as exc:
                    raise SleepError(f"to make room, {victim.url} was to sleep: {exc}"
                                     ) from None
        finally:  # left, failed or made room another way: they serve on
            for engine in self.engines.values():
                if engine.state == "draining":
                    engine.state = "awake"

    async def _freed_or(self, seconds: float | None) -> None:
        """Until an engine's last request ends, or ``seconds`` pass (None: no bound)."""
        freed = asyncio.ensure_future(self._freed.wait())
        if seconds is None:
            await freed
            return
        timer = asyncio.ensure_future(self.sleep(seconds))
        try:
            await asyncio.wait({freed, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (freed, timer):
                task.cancel()


@dataclass(frozen=True)
class Member:
    """A route that takes turns: its group, the group's policy, its engine's key."""

    group: str
    max_awake: int
    url: str  # the engine's key: its base URL, or a router's member (engine_key)
    min_awake: float = 0.0
    max_wakes: int | None = None
    control: str = "vllm"
    pinned: bool = False


def engine_key(route: Route) -> str:
    """The key of a route's engine in its sleep group.

    vLLM: its upstream's base URL (one engine each); llama-server's router: that URL and
    the member it is asked for (one router, many members).
    """
    upstream = route.deployments[0]
    if route.sleep is not None and route.sleep.control == "llama-router":
        return f"{upstream.base_url}#{upstream.model or route.models[0]}"
    return upstream.base_url


def member(route: Route) -> Member | None:
    """The sleep group member a route is (None: it takes no turns)."""
    sleep = route.sleep
    if sleep is None:
        return None
    return Member(sleep.group, sleep.max_awake, engine_key(route), sleep.min_awake_seconds,
                  sleep.max_wakes_per_minute, sleep.control, sleep.pinned)


class Sleepers:
    """Every sleep group of the gateway's routes, kept across reconfigures."""

    def __init__(self, control: EngineControl,
                 changes: Callable[[str, str, str], None] = lambda g, a, o: None, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 others: dict[str, EngineControl] | None = None) -> None:
        # vLLM's sleep mode, and the other kinds of control by name (Member.control)
        self.control, self._changes = control, changes
        self.controls: dict[str, EngineControl] = {"vllm": control, **(others or {})}
        self._clock, self._sleep = clock, sleep
        self.groups: dict[str, SleepGroup] = {}

    def configure(self, members: Iterable[Member]) -> None:
        """The groups now: each route that takes turns, with its group's policy.

        An engine known before keeps its state; a group's new ``max_awake``, ``min_awake``
        and ``max_wakes`` apply from its next change.
        """
        wanted: dict[str, tuple[Member, list[Member]]] = {}
        for member in members:
            wanted.setdefault(member.group, (member, []))[1].append(member)
        old, self.groups = self.groups, {}
        for name, (policy, routes) in wanted.items():
            group = old.get(name) or self._new(name, policy.max_awake)
            group.max_awake, group.control = policy.max_awake, self.controls[policy.control]
            group.min_awake, group.max_wakes = policy.min_awake, policy.max_wakes
            group.engines = {r.url: group.engines.get(r.url) or Engine(r.url) for r in routes}
            for route in routes:
                group.engines[route.url].pinned = route.pinned
            self.groups[name] = group

    def line(self, route: Route) -> tuple[int, int]:
        """``SleepGroup.line`` of the route's engine; (0, 0) where it takes no turns."""
        found = member(route)
        group = self.groups.get(found.group) if found is not None else None
        return (0, 0) if found is None or group is None else group.line(found.url)

    async def report(self, members: Iterable[tuple[str, str, str]]) -> dict[str, Any]:
        """GET /models: each engine's model, loaded or not, as llama-server's router says.

        ``members``: (model, group, engine URL) of each route that takes turns. Engines not
        known yet are asked first (unless their group is changing one).
        """
        listed = list(members)
        await asyncio.gather(*(g.refresh() for g in self.groups.values()))
        data = []
        for model, group, url in listed:
            found = self.groups.get(group)
            engine = found.engines.get(url) if found is not None else None
            if found is None or engine is None:
                continue
            loaded = engine.loaded
            status: dict[str, Any] = {"value": loaded} if loaded != "failed" else {
                "value": "unloaded", "failed": True, "reason": engine.failure}
            said = getattr(found.control, "status", None)  # the engine's own words, if any
            if said is not None and engine.state != "changing":
                with contextlib.suppress(SleepError):
                    status = await said(url)
            data.append({"id": model, "object": "model", "status": status})
        return {"object": "list", "data": data}

    def _new(self, name: str, max_awake: int) -> SleepGroup:
        def counted(action: str, outcome: str) -> None:
            self._changes(name, action, outcome)

        return SleepGroup(name, max_awake, self.control, changes=counted, clock=self._clock,
                          sleep=self._sleep)


class HttpControl:
    """vLLM's sleep endpoints over HTTP (served with VLLM_SERVER_DEV_MODE=1)."""

    def __init__(self) -> None:
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=CONTROL_SECONDS))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def _call(self, method: str, base_url: str, path: str) -> str:
        url = base_url.removesuffix("/").removesuffix("/v1") + path
        try:
            async with self._session().request(method, url) as r:
                text = await r.text()
                if r.status == 404:
                    raise SleepError(f"{method} {url} answered 404: start the engine with "
                                     "--enable-sleep-mode and VLLM_SERVER_DEV_MODE=1")
                if r.status >= 300:
                    raise SleepError(f"{method} {url} answered {r.status}: {text[:300]}")
                return text
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SleepError(f"{method} {url}: {type(exc).__name__}: {exc}".rstrip(": ")
                             ) from None

    async def sleep(self, base_url: str) -> None:
        await self._call("POST", base_url, "/sleep?level=1")

    async def wake(self, base_url: str) -> None:
        await self._call("POST", base_url, "/wake_up")

    async def sleeping(self, base_url: str) -> bool:
        text = await self._call("GET", base_url, "/is_sleeping")
        try:
            return bool(json.loads(text)["is_sleeping"])
        except (ValueError, KeyError, TypeError):
            raise SleepError(f"GET /is_sleeping of {base_url} answered {text[:200]!r}, "
                             'not {"is_sleeping": true|false}') from None
