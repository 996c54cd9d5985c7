"""The reconcile queue: each key once, never two workers on one key, retries with backoff."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    """A deduplicating FIFO of keys (client-go's workqueue semantics, on asyncio).

    A key added while queued is not queued twice; a key added while a worker holds it is
    queued again when that worker calls ``done`` — so a change that arrives mid-reconcile
    is never lost, and one key is never reconciled twice at once. ``retry`` re-adds a key
    after a per-key exponential backoff (``base`` doubling to ``cap``) that ``forget``
    resets after a success.
    """

    def __init__(self, *, base: float = 1.0, cap: float = 300.0) -> None:
        self._queue: asyncio.Queue[K] = asyncio.Queue()
        self._queued: set[K] = set()
        self._active: set[K] = set()
        self._again: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self.base, self.cap = base, cap

    def __len__(self) -> int:
        return self._queue.qsize()

    @property
    def in_flight(self) -> int:
        return len(self._active)

    @property
    def scheduled(self) -> int:
        """Keys waiting for a retry or a later look."""
        return len(self._timers)

    def add(self, key: K) -> None:
        if key in self._active:
            self._again.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def get(self) -> K:
        """The next key; the caller owns it until ``done``."""
        key = await self._queue.get()
        self._queued.discard(key)
        self._active.add(key)
        return key

    def done(self, key: K) -> None:
        self._active.discard(key)
        if key in self._again:
            self._again.discard(key)
            self.add(key)

    def retry(self, key: K) -> float:
        """Queue ``key`` again after its backoff; returns the delay."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        return self.add_after(key, min(self.cap, self.base * 2 ** failures))

    def add_after(self, key: K, delay: float) -> float:
        """Queue ``key`` in ``delay`` seconds (an earlier pending timer wins)."""
        loop = asyncio.get_running_loop()
        timer = self._timers.get(key)
        if timer is not None and timer.when() <= loop.time() + delay:
            return delay
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_later(delay, self._fire, key)
        return delay

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def forget(self, key: K) -> None:
        """Reset the key's backoff (it succeeded)."""
        self._failures.pop(key, None)

    def drop(self, key: K) -> None:
        """Forget a key entirely (its object is gone)."""
        self.forget(key)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
