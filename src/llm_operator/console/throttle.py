"""Failed sign-ins, counted per address: too many in a minute and that address waits (pure)."""

from __future__ import annotations

from collections import OrderedDict, deque

LIMIT = 10  # failed sign-ins per address per window
WINDOW_SECONDS = 60.0
ADDRESSES_KEPT = 10_000  # the least recently failing addresses are forgotten first


class SignInThrottle:
    """Failed sign-ins of each address, the last ``window`` seconds of them.

    An address with ``limit`` of them waits until the oldest is ``window`` seconds old. A
    valid key signs in as ever from an address that is not waiting; it is not counted.
    """

    def __init__(self, limit: int = LIMIT, window: float = WINDOW_SECONDS,
                 kept: int = ADDRESSES_KEPT) -> None:
        self.limit, self.window, self.kept = limit, window, kept
        self._failed: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, address: str, now: float) -> float:
        """Seconds ``address`` must wait before its next sign-in (0: it may try now)."""
        times = self._failed.get(address)
        if times is None:
            return 0.0
        while times and now - times[0] >= self.window:
            times.popleft()
        if not times:
            del self._failed[address]
            return 0.0
        return max(times[0] + self.window - now, 0.0) if len(times) >= self.limit else 0.0

    def failed(self, address: str, now: float) -> None:
        times = self._failed.pop(address, None) or deque(maxlen=self.limit)
        times.append(now)
        self._failed[address] = times  # the most recent last
        while len(self._failed) > self.kept:
            self._failed.popitem(last=False)
