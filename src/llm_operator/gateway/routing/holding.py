"""Requests that wait for a route to get an upstream (a model scaling from zero), in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


class Holds:
    """Waiting rooms per route, bounded per route and in total.

    ``release`` wakes a route's waiters in the order they arrived (asyncio wakes an event's
    waiters first come, first served); ``on_change`` hears every count change (metrics).
    """

    def __init__(self, per_route: int, total: int,
                 on_change: Callable[[str, int], None] = lambda _label, _count: None) -> None:
        self.per_route, self.total = per_route, total
        self.held: dict[str, int] = {}
        self._events: dict[str, asyncio.Event] = {}
        self._on_change = on_change

    def refusal(self, label: str) -> str | None:
        """Why one more request cannot wait for ``label`` (None: it can)."""
        if self.held.get(label, 0) >= self.per_route:
            return f"{self.per_route} requests are already waiting for it"
        if sum(self.held.values()) >= self.total:
            return f"{self.total} requests are already waiting for models"
        return None

    @contextlib.asynccontextmanager
    async def holding(self, label: str) -> AsyncIterator[None]:
        """Count one waiting request for ``label`` while inside."""
        self._count(label, 1)
        try:
            yield
        finally:
            self._count(label, -1)

    def _count(self, label: str, delta: int) -> None:
        count = self.held[label] = self.held.get(label, 0) + delta
        if count == 0:
            del self.held[label]
        self._on_change(label, count)

    async def wait(self, label: str, timeout: float) -> bool:
        """Until ``release(label)`` (True) or ``timeout`` seconds (False)."""
        event = self._events.setdefault(label, asyncio.Event())
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True

    def release(self, label: str) -> None:
        """Wake every request waiting for ``label`` (its upstreams changed, or it is gone)."""
        event = self._events.pop(label, None)
        if event is not None:
            event.set()
