"""Token-bucket rate limits for requests and (after the fact) tokens per minute."""

from __future__ import annotations

import math
import time
from collections.abc import Callable


class TokenBucket:
    """``per_minute`` units per minute with a burst of the same size.

    ``take()`` either spends one unit or returns how many seconds until one is available.
    ``spend(n)`` charges units after the fact (tokens counted from the response) and may
    drive the balance negative, which then delays later requests.
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._level = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
        self._at = now

    def wait_seconds(self, units: float = 1.0) -> float:
        """Seconds until ``units`` are available (0 when they are now)."""
        self._refill()
        missing = units - self._level
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, units: float = 1.0) -> float:
        """Spend ``units`` if available and return 0, else return the wait in seconds."""
        wait = self.wait_seconds(units)
        if wait == 0.0:
            self._level -= units
        return wait

    def spend(self, units: float) -> None:
        self._refill()
        self._level -= units


def retry_after_header(seconds: float) -> str:
    """A Retry-After value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
