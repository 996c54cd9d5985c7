"""A circuit breaker per route and upstream: fail fast while an upstream keeps failing."""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum


class State(IntEnum):
    """Exported as a gauge: 0 closed, 1 half-open, 2 open."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class Breaker:
    """Opens after ``threshold`` consecutive failures.

    After ``open_seconds`` it lets one trial request through (half-open); the trial's success
    closes the circuit, its failure re-opens it.
    """

    def __init__(self, threshold: int, open_seconds: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.open_seconds = open_seconds
        self._clock = clock
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_in_flight = False

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return State.CLOSED
        if self._clock() - self._opened_at >= self.open_seconds:
            return State.HALF_OPEN
        return State.OPEN

    def retry_in(self) -> float:
        """Seconds until the circuit lets a trial through."""
        if self._opened_at is None:
            return 0.0
        return max(0.0, self.open_seconds - (self._clock() - self._opened_at))

    def allow(self) -> bool:
        state = self.state
        if state is State.CLOSED:
            return True
        if state is State.HALF_OPEN and not self._trial_in_flight:
            self._trial_in_flight = True
            return True
        return False

    def release(self) -> None:
        """End a trial without a verdict (its client went away): the next request tries.

        Without this a cancelled trial left the circuit half-open with its one trial slot
        taken, and every later request was refused as circuit_open for good.
        """
        self._trial_in_flight = False

    def success(self) -> None:
        self._failures = 0
        self._opened_at = None
        self._trial_in_flight = False

    def failure(self) -> None:
        self._failures += 1
        if self._trial_in_flight or self._failures >= self.threshold:
            self._opened_at = self._clock()
        self._trial_in_flight = False
