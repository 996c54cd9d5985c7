"""Each replica's saturation point: its slots plus an engine queue adapted from its reports.

Holding every request beyond a replica's slots in the gateway keeps the bands' order and
fair shares exact, but each freed slot then idles for the round trip that brings the next
request (the answer back to the gateway, the next request out, the engine's next step): on
short answers a quarter of the throughput (bench/flow). A few requests waiting in the
engine refill freed slots at once, at the price of an interactive request finding them
ahead of it. How many is worth it depends on the engine and the traffic, so it is adapted
from what the engine reports while requests wait here:

- a slot idle while requests wait here (the engine runs fewer than its slots and holds
  none waiting): the round trip cost a slot; one more may wait in the engine, up to the
  most the settings allow;
- a KV cache past its threshold (vLLM): the engine cannot run more than it does; none
  beyond what it runs;
- the engine full with a request to spare, for ``CALM_LOOKS`` looks in a row: one fewer,
  to find the least that keeps the slots full;
- an engine whose metrics cannot be read: the configured ``engineQueue`` (never a stall).

Who may use it is flow control's to decide (``Pool.in_engine_queue``: only what it would
send next anyway). Pure: the gateway's engine watch (gateway/flow/engine_watch.py,
gateway/routing/looks.py) looks and feeds the reports in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from llm_operator.gateway.settings.flow_control import FlowControl

CALM_LOOKS = 50  # looks in a row with the slots full and a request to spare: one fewer


@dataclass(frozen=True)
class EngineReport:
    """What an engine's metrics say: requests waiting and running, KV cache use (0..1)."""

    waiting: float
    running: float
    kv_usage: float = 0.0


@dataclass
class Headroom:
    """One replica's engine queue: requests it is sent beyond its slots (may be negative)."""

    value: int
    calm: int = 0  # looks in a row that found the slots full and a request to spare
    unreadable: bool = False  # its metrics could not be read at the last look


def adapt(headroom: Headroom, report: EngineReport | None, *, slots: int, start: int,
          most: int, kv_threshold: float, demand: bool) -> int:
    """``headroom``'s value after one look at its engine (``report``; None: unreadable).

    ``demand``: requests of its model wait in the gateway now (only then does an idle slot
    say the round trip cost it).
    """
    if report is None:
        headroom.value, headroom.calm, headroom.unreadable = start, 0, True
        return start
    headroom.unreadable = False
    value = headroom.value
    if report.kv_usage >= kv_threshold:  # what it runs is all it can: none beyond
        headroom.calm = 0
        headroom.value = max(1 - slots, min(value, 0, round(report.running) - slots))
        return headroom.value
    if value < 0:  # its KV cache has room again
        headroom.value = value + 1
        return headroom.value
    if not demand:
        headroom.calm = 0
        return value
    if report.running < slots and report.waiting < 1:  # a slot idles while requests wait
        headroom.calm = 0
        headroom.value = min(most, value + 1)
        return headroom.value
    headroom.calm += 1
    if headroom.calm >= CALM_LOOKS:
        headroom.calm = 0
        headroom.value = max(0, value - 1)
    return headroom.value


class Saturation:
    """Every replica's headroom, by base URL, under one set of flow-control settings."""

    def __init__(self, settings: FlowControl) -> None:
        self.settings = settings
        self._headroom: dict[str, Headroom] = {}

    @property
    def adaptive(self) -> bool:
        return self.settings.enabled and self.settings.saturation.adaptive

    def headroom(self, url: str) -> int:
        """Requests the replica at ``url`` is sent beyond its slots now."""
        found = self._headroom.get(url)
        return found.value if found is not None else self.settings.engine_queue

    def looked(self, url: str, report: EngineReport | None, *, slots: int,
               demand: bool) -> tuple[bool, bool]:
        """One look at ``url``'s engine: (its headroom changed, its metrics just lost).

        Lost: unreadable now and not at the look before (the caller logs that once).
        """
        settings = self.settings
        if not self.adaptive:
            return False, False
        headroom = self._headroom.get(url)
        if headroom is None:
            headroom = self._headroom[url] = Headroom(settings.engine_queue)
        before, was_unreadable = headroom.value, headroom.unreadable
        most = max(settings.engine_queue, settings.saturation.most(slots))
        adapt(headroom, report, slots=slots, start=settings.engine_queue, most=most,
              kv_threshold=settings.saturation.kv_cache_threshold, demand=demand)
        return headroom.value != before, headroom.unreadable and not was_unreadable

    def configure(self, settings: FlowControl, urls: Iterable[str]) -> None:
        """New settings; replicas no longer routed are forgotten, the others kept.

        Unless the saturation settings changed: then every replica starts again.
        """
        old, self.settings = self.settings, settings
        changed = (old.saturation, old.engine_queue) != (settings.saturation,
                                                          settings.engine_queue)
        keep = set(urls) if self.adaptive and not changed else set()
        for url in [u for u in self._headroom if u not in keep]:
            del self._headroom[url]
