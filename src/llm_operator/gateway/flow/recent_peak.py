"""The most a count reached lately: two fixed windows, so a look costs a few comparisons."""

from __future__ import annotations


class RecentPeak:
    """The highest value seen in the last ``seconds`` (up to twice that long ago).

    Values are seen as they rise (``see``); ``most`` also takes the value now, so a level
    held since before both windows still counts. Two back-to-back windows of ``seconds``
    each: the peak is forgotten between ``seconds`` and ``2 * seconds`` after it.
    """

    __slots__ = ("_current", "_previous", "_start", "seconds")

    def __init__(self, seconds: float, now: float) -> None:
        self.seconds = seconds
        self._start, self._current, self._previous = now, 0, 0

    def _roll(self, now: float) -> None:
        elapsed = now - self._start
        if elapsed >= self.seconds:
            self._previous = self._current if elapsed < 2 * self.seconds else 0
            self._current, self._start = 0, now

    def see(self, value: int, now: float) -> None:
        self._roll(now)
        self._current = max(self._current, value)

    def most(self, value: int, now: float) -> int:
        """The peak of the window, or ``value`` (the count now) where that is higher."""
        self._roll(now)
        return max(value, self._current, self._previous)
