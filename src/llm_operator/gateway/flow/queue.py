"""Flow control's waiting room: each band's queue, per fairness group and member.

Also the slot a request holds (``Lease``), what flow control reports (``FlowObserver``),
how it refuses (``FlowRefused``), and a pool's sizes (``Sizes``); gateway/flow/control.py
decides who waits and who goes.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from llm_operator.gateway.settings.flow_control import Band


class Holder(Protocol):
    """Where a slot goes back when its request is done: a pool (gateway/flow/control.py)."""

    def released(self, lease: Lease) -> None: ...


class Lease:
    """A slot held by one request until ``release`` (idempotent)."""

    __slots__ = ("_pool", "band", "group", "member", "since")

    def __init__(self, pool: Holder | None, band: str, group: str, member: str,
                 since: float) -> None:
        self._pool, self.band, self.group, self.member = pool, band, group, member
        self.since = since

    def release(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.released(self)


FREE = Lease(None, "", "", "", 0.0)  # a pool without flow control: nothing to give back


class Holdings(Protocol):
    """What a pool's requests hold, which decides whose turn it is."""

    held: Counter[str]  # by fairness group
    last: dict[str, int]  # by group: the tick it was last served
    held_members: Counter[tuple[str, str]]
    last_members: dict[tuple[str, str], int]


class Sizes(NamedTuple):
    """A pool's size: its saturation point, its bound, and how much of it waits in engines.

    ``capacity``: requests its replicas take at once, their slots plus their engine
    queues (None: not flow-controlled); ``bound``: the most out and queued together
    (upstreams' maxConcurrent; None: none); ``engine_queue``: the part of ``capacity``
    that waits in the engines' own queues (gateway/flow/saturation.py).
    """

    capacity: int | None
    bound: int | None
    engine_queue: int = 0


class FlowRefused(Exception):
    """A request flow control turns away: its status, error code, message and Retry-After."""

    def __init__(self, status: int, code: str, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after = retry_after


class FlowObserver:
    """What flow control reports (metrics); this one reports nothing."""

    def depth(self, pool: str, band: str, queued: int) -> None:
        """``queued`` requests of ``band`` wait in ``pool`` now."""

    def admitted(self, pool: str, band: str, waited: float) -> None:
        """A request got a slot after ``waited`` seconds (0: at once)."""

    def refused(self, pool: str, band: str, outcome: str) -> None:
        """A request left without a slot (``outcome``, below).

        shed, queue_full, timeout, cancelled, overloaded, displaced (it waited and gave way
        at a bound to a lighter fairness ID's request).
        """

    def ignored(self, pool: str, reason: str) -> None:
        """A request's band header was not taken (classify.Classified.ignored)."""


@dataclass(eq=False)
class Ticket:
    group: str
    member: str
    since: float
    future: asyncio.Future[Lease]


class BandQueue:
    """One band's waiting requests: per group, per member, first come first served."""

    def __init__(self, band: Band) -> None:
        self.band = band
        self.groups: dict[str, dict[str, deque[Ticket]]] = {}
        self.size = 0

    def push(self, ticket: Ticket) -> None:
        self.groups.setdefault(ticket.group, {}).setdefault(ticket.member, deque()) \
            .append(ticket)
        self.size += 1

    def tickets(self) -> Iterator[Ticket]:
        """Every waiting request, group by group, each member's in arrival order."""
        for members in self.groups.values():
            for fifo in members.values():
                yield from fifo

    def remove(self, ticket: Ticket) -> bool:
        """Take ``ticket`` out (its client left); False when it is not in this queue."""
        fifo = self.groups.get(ticket.group, {}).get(ticket.member)
        if fifo is None or ticket not in fifo:
            return False
        fifo.remove(ticket)
        self.size -= 1
        self._prune(ticket.group, ticket.member)
        return True

    def waiting(self, group: str) -> int:
        """Requests of fairness ID ``group`` waiting in this band."""
        return sum(len(fifo) for fifo in self.groups.get(group, {}).values())

    def take_newest(self, group: str, member: str) -> Ticket:
        """Take out the member's latest arrival (it has waited least)."""
        ticket = self.groups[group][member].pop()
        self.size -= 1
        self._prune(group, member)
        return ticket

    def next_group(self, pool: Holdings) -> str:
        """The fairness group ``pop`` takes from: holding least, then served longest ago."""
        groups = self.groups
        return next(iter(groups)) if len(groups) == 1 else min(
            groups, key=lambda g: (pool.held[g], pool.last.get(g, -1)))

    def pop(self, pool: Holdings, group: str) -> Ticket:
        """The next request of ``group`` (``next_group``'s): its fairest member's oldest."""
        members = self.groups[group]
        member = next(iter(members)) if len(members) == 1 else min(
            members, key=lambda m: (pool.held_members[(group, m)],
                                    pool.last_members.get((group, m), -1)))
        ticket = members[member].popleft()
        self.size -= 1
        self._prune(group, member)
        return ticket

    def _prune(self, group: str, member: str) -> None:
        members = self.groups[group]
        if not members[member]:
            del members[member]
            if not members:
                del self.groups[group]
