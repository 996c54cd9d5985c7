"""Flow control: requests beyond a pool's slots wait here, by band priority and fair shares.

A pool is the upstreams one model's routes share (its replicas). While fewer requests are
out than the replicas have slots, a request goes at once; beyond them a few more may wait
in the engines' own queues (the pool's ``engine_queue``, adapted by gateway/flow/saturation.py),
but only those flow control would send next anyway; after that a request waits in its
band's queue here. A freed slot goes to the highest band with a waiting request (strict
priority) that holds less than its share of the slots, and within the band to the
fairness group holding fewest slots (then the one served longest ago), and within the
group likewise to a member: no ID holds more than its share while another waits. Queues
are bounded in length and in wait; a client that leaves is taken out at once. A band's
share cap keeps slots free for the bands above it (batch work): an engine cannot take
back a slot a request holds. It keeps what they need, not more: beyond ``maxShare`` a
band may take what the bands above have left unused lately (``reserveSeconds``).
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from llm_operator.gateway.flow.bands import Classified
from llm_operator.gateway.flow.queue import (
    FREE,
    BandQueue,
    FlowObserver,
    FlowRefused,
    Lease,
    Sizes,
    Ticket,
)
from llm_operator.gateway.flow.recent_peak import RecentPeak
from llm_operator.gateway.settings.flow_control import Band, FlowControl

Clock = Callable[[], float]


@dataclass(eq=False)
class Pool:
    """One model's replicas as flow control sees them: slots, holders, queues."""

    name: str
    capacity: int | None  # its replicas' slots and engine queues; None: not controlled
    bound: int | None  # most requests out and queued together (upstreams' maxConcurrent)
    flow: Flow
    engine_queue: int = 0  # of capacity, the requests let wait in the engines' queues
    in_flight: int = 0
    held: Counter[str] = field(default_factory=Counter)
    held_bands: Counter[str] = field(default_factory=Counter)
    held_members: Counter[tuple[str, str]] = field(default_factory=Counter)
    last: dict[str, int] = field(default_factory=dict)
    last_members: dict[tuple[str, str], int] = field(default_factory=dict)
    queues: dict[str, BandQueue] = field(default_factory=dict)
    hold_seconds: float = 0.0  # moving average of how long a slot is held
    ended: dict[str, float] = field(default_factory=dict)  # band: when one last let go
    outside: float = -math.inf  # when its engines last ran requests others sent (peers)
    looked: float = -math.inf  # when they were last looked at (Flow.looked)
    # capped band: the most the bands above it held at once lately (Flow.reserving)
    above_peaks: dict[str, RecentPeak] = field(default_factory=dict)
    _timer: asyncio.TimerHandle | None = None  # a dispatch when a band's quiet time ends

    @property
    def queued(self) -> int:
        return sum(q.size for q in self.queues.values())

    def queue(self, band: Band) -> BandQueue:
        queue = self.queues.get(band.name)
        if queue is None:
            queue = self.queues[band.name] = BandQueue(band)
        return queue

    def room(self, band: Band) -> bool:
        """Whether a request of ``band`` may take a slot now.

        One is free, and the band holds less than its share (``share``).
        """
        if self.capacity is None:
            return True
        return self.in_flight < self.capacity and (
            band.max_share >= 1.0 or self.held_bands[band.name] < self.share(band)) and (
            not band.idle_seconds or self.quiet(band))

    def share(self, band: Band) -> int:
        """The most slots a band with ``maxShare`` below 1 may hold now (at least one).

        Its ``maxShare`` of the slots, or, where more, every slot but the most the bands
        above held at once in the last ``reserveSeconds``: room is kept for the traffic
        above as it has been, and an engine whose higher traffic is light stays full.
        """
        slots = self.capacity_slots
        share = max(1, math.floor(slots * band.max_share))
        if band.reserve_seconds:
            now_above = self._held_above(band)
            peak = self.above_peaks.get(band.name)
            most = now_above if peak is None else peak.most(now_above, self.flow.clock())
            share = max(share, slots - most)
        return share

    def in_engine_queue(self, band: Band, group: str) -> bool:
        """Whether a request of ``band`` and ``group`` may go beyond the slots now.

        Once every slot runs, a request sent waits in an engine's queue, first come first
        served. Only one flow control would send next anyway goes there: of the highest
        band with requests here (or ended within a slot's average hold: a closed-loop
        client between two requests), and of a fairness ID holding less than its share of
        the capacity (with the IDs holding or waiting here). The engine queue refills freed
        slots for the traffic it serves, and a lighter ID or a higher band arriving later
        finds none of another's requests ahead of it beyond what a slot holds.
        """
        if self.in_flight < self.capacity_slots:
            return True
        above = self.flow.above.get(band.name, ())
        recently = self.flow.clock() - self.hold_seconds  # a closed-loop client's gap
        if any(self.held_bands[name] or (name in self.queues and self.queues[name].size)
               or self.ended.get(name, -math.inf) > recently for name in above):
            return False
        groups = set(self.held)
        for queue in self.queues.values():
            groups.update(queue.groups)
        groups.add(group)
        return self.held[group] * len(groups) < (self.capacity or 0)

    @property
    def capacity_slots(self) -> int:
        """The replicas' slots (capacity less the engine queues)."""
        return (self.capacity or 0) - self.engine_queue

    def quiet(self, band: Band) -> bool:
        """Whether higher bands have been quiet for ``band``'s ``idleSeconds``.

        And, where the engines are looked at, a recent look found nobody else's requests.
        """
        now = self.flow.clock()
        every = self.flow.look_every
        return self.quiet_from(band) <= now and (
            every is None or self.looked >= now - max(band.idle_seconds, 2 * every))

    def quiet_from(self, band: Band) -> float:
        """When ``band`` (with ``idleSeconds``) may take slots.

        That long after the last request of a higher band ended, or the engines were last
        seen running requests another gateway sent (``Flow.looked``); never while one of
        a higher band is in flight here.
        """
        above = self.flow.above.get(band.name, ())
        if any(self.held_bands[name] for name in above):
            return math.inf
        return max(self.outside, *(self.ended.get(name, -math.inf) for name in above)
                   ) + band.idle_seconds

    def grant(self, band: str, group: str, member: str) -> Lease:
        self.in_flight += 1
        self.held_bands[band] += 1
        for capped in self.flow.reserving.get(band, ()):
            self._saw_above(capped)
        self.held[group] += 1
        self.held_members[(group, member)] += 1
        self.flow.tick += 1
        self.last[group] = self.last_members[(group, member)] = self.flow.tick
        return Lease(self, band, group, member, self.flow.clock())

    def released(self, lease: Lease) -> None:
        self.in_flight -= 1
        self.held_bands[lease.band] -= 1
        self.held[lease.group] -= 1
        if not self.held[lease.group]:
            del self.held[lease.group]
        key = (lease.group, lease.member)
        self.held_members[key] -= 1
        if not self.held_members[key]:
            del self.held_members[key]
        now = self.flow.clock()
        self.ended[lease.band] = now
        seconds = now - lease.since
        self.hold_seconds = seconds if not self.hold_seconds else \
            0.9 * self.hold_seconds + 0.1 * seconds
        self.dispatch()

    def _saw_above(self, capped: Band) -> None:
        """The bands above ``capped`` hold one more: its peak of them may rise."""
        now = self.flow.clock()
        peak = self.above_peaks.get(capped.name)
        if peak is None or peak.seconds != capped.reserve_seconds:
            peak = self.above_peaks[capped.name] = RecentPeak(capped.reserve_seconds, now)
        peak.see(self._held_above(capped), now)

    def _held_above(self, band: Band) -> int:
        """Slots the bands above ``band`` hold now (none for a band just removed)."""
        return sum(self.held_bands[name] for name in self.flow.above.get(band.name, ()))

    def dispatch(self) -> None:
        """Give free slots to waiting requests: highest band first, fairly within it.

        Afterwards every band still waiting holds its share or waits for its quiet time
        (then a timer dispatches again), or no slot is free.
        """
        while self.capacity is None or self.in_flight < self.capacity:
            queue = next((q for q in self.flow.order(self) if q.size and self.room(q.band)),
                         None)
            if queue is None:
                if self.queued:
                    self._dispatch_later()
                return
            group = queue.next_group(self)
            if self.engine_queue and not self.in_engine_queue(queue.band, group):
                return  # it waits here for a slot
            ticket = queue.pop(self, group)
            ticket.future.set_result(self.grant(queue.band.name, ticket.group,
                                                ticket.member))
            self.flow.observer.admitted(self.name, queue.band.name,
                                        self.flow.clock() - ticket.since)
            self.flow.observer.depth(self.name, queue.band.name, queue.size)

    def _dispatch_later(self) -> None:
        """A band waits only for its quiet time (``idleSeconds``): dispatch again then."""
        now = self.flow.clock()
        at = min((t for q in self.queues.values() if q.size and q.band.idle_seconds
                  and now < (t := self.quiet_from(q.band)) < math.inf), default=None)
        if at is None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # configured before the server runs: nobody waits yet
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_later(at - now, self.dispatch)

    def weight(self, group: str) -> int:
        """What fairness ID ``group`` holds here: its requests running and waiting."""
        return self.held[group] + sum(q.waiting(group) for q in self.queues.values())

    def displaceable(self, who: Classified, queues: list[BandQueue]
                     ) -> tuple[BandQueue, str, str] | None:
        """Whose waiting request gives way to ``who``'s at a bound: (queue, group, member).

        From the lowest band among ``queues`` with a request waiting, not above ``who``'s
        band: the fairness ID holding the most (running plus waiting), its member holding
        the most. Within ``who``'s own band only when that ID would still hold more than
        ``who``'s does with the new request; None: ``who``'s request is the one refused.
        """
        priority = who.band.priority
        present = [q for q in queues if q.size and q.band.priority <= priority]
        if not present:
            return None
        queue = min(present, key=lambda q: q.band.priority)
        group = max(queue.groups, key=self.weight)
        if queue.band.priority == priority and (
                group == who.group or self.weight(group) <= self.weight(who.group) + 1):
            return None
        members = queue.groups[group]
        member = max(members, key=lambda m: self.held_members[(group, m)] + len(members[m]))
        return queue, group, member

    def retry_after(self, ahead: int) -> float:
        """About how long until ``ahead`` queued requests have had a slot (at least 1 s)."""
        per_slot = self.hold_seconds or 1.0
        return max(1.0, math.ceil(per_slot * (ahead + 1) / max(1, self.capacity or 1)))


class Flow:
    """Every pool's slots and queues under one set of flowControl settings."""

    def __init__(self, settings: FlowControl, clock: Clock,
                 observer: FlowObserver | None = None) -> None:
        self.settings, self.clock = settings, clock
        self.observer = observer or FlowObserver()
        self.pools: dict[str, Pool] = {}
        self.tick = 0
        self._order: list[str] = []
        self.above: dict[str, tuple[str, ...]] = {}  # band: the bands of higher priority
        self._idle: frozenset[str] = frozenset()  # the bands with idleSeconds
        # band: the capped bands (maxShare, reserveSeconds) it is above, which follow
        # the most the bands above them hold (Pool.share)
        self.reserving: dict[str, tuple[Band, ...]] = {}
        # set where a band with idleSeconds must also wait for a look at the engines that
        # finds nobody else's requests (the router, whose peers send to the same engines)
        self.look_every: float | None = None

    def order(self, pool: Pool) -> list[BandQueue]:
        """The pool's band queues, highest priority first."""
        return [pool.queues[name] for name in self._order if name in pool.queues]

    def configure(self, settings: FlowControl,
                  pools: Mapping[str, Sizes | tuple[int | None, int | None]]) -> None:
        """New settings and pools ({name: Sizes}); waiting requests keep their place.

        A request waiting in a band that is gone moves to the default band; one waiting for
        a pool that is gone is refused (its model was removed).
        """
        self.settings = settings
        self._order = [b.name for b in sorted(settings.bands, key=lambda b: -b.priority)]
        self.above = {b.name: tuple(h.name for h in settings.bands if h.priority > b.priority)
                      for b in settings.bands}
        self._idle = frozenset(b.name for b in settings.bands if b.idle_seconds)
        capped = [b for b in settings.bands if b.max_share < 1.0 and b.reserve_seconds]
        self.reserving = {b.name: tuple(c for c in capped if b.name in self.above[c.name])
                          for b in settings.bands}
        default = settings.band(settings.default_band)
        assert default is not None
        old, self.pools = self.pools, {}
        for name, given in pools.items():
            capacity, bound, queue_size = Sizes(*given)
            pool = old.pop(name, None) or Pool(name, capacity, bound, self)
            pool.capacity = capacity if settings.enabled else None
            pool.bound, pool.engine_queue = bound, queue_size
            for band_name, queue in list(pool.queues.items()):
                band = settings.band(band_name)
                if band is None:  # moved to the default band, in their order
                    del pool.queues[band_name]
                    target = pool.queue(default)
                    for ticket in queue.tickets():
                        target.push(ticket)
                else:
                    queue.band = band
            self.pools[name] = pool
            pool.dispatch()
        for pool in old.values():
            for queue in pool.queues.values():
                for ticket in queue.tickets():
                    ticket.future.set_exception(FlowRefused(
                        503, "model_unavailable", f"{pool.name!r} was removed while the "
                        "request waited for a slot", 5.0))
                self.observer.depth(pool.name, queue.band.name, 0)

    def resize(self, pools: Mapping[str, Sizes]) -> None:
        """New sizes for known pools (their engine queues adapted).

        Waiting requests take any room that opened.
        """
        for name, sizes in pools.items():
            pool = self.pools.get(name)
            if pool is not None and self.settings.enabled and (
                    pool.capacity, pool.engine_queue) != (sizes.capacity, sizes.engine_queue):
                pool.capacity, pool.engine_queue = sizes.capacity, sizes.engine_queue
                pool.dispatch()

    def busy(self) -> list[str]:
        """Pools whose requests wait here or fill their slots: whose engines to look at."""
        return [name for name, pool in self.pools.items() if pool.capacity  # replicas
                and (pool.queued or pool.in_flight >= pool.capacity)]

    def controls(self, pool: str) -> bool:
        """Whether requests to ``pool`` may wait for a slot (its slots are known)."""
        found = self.pools.get(pool)
        return found is not None and found.capacity is not None

    def held_back(self) -> list[str]:
        """Pools where a band with ``idleSeconds`` waits or runs: whose engines to look at.

        The router looks at them every ``look_every`` seconds (``looked``).
        """
        return [name for name, pool in self.pools.items()
                if any(pool.held_bands[b] or (b in pool.queues and pool.queues[b].size)
                       for b in self._idle)]

    def looked(self, pool: str, outside: bool) -> None:
        """What a look at ``pool``'s engines found.

        ``outside``: requests another gateway sent (a router replica's peer, a client
        straight to the Service), which bands with ``idleSeconds`` wait for as for this
        gateway's own.
        """
        found = self.pools.get(pool)
        if found is None:
            return
        found.looked = self.clock()
        if outside:
            found.outside = found.looked
        else:
            found.dispatch()

    def queued(self, pool: str) -> int:
        """Requests waiting for a slot of ``pool``."""
        found = self.pools.get(pool)
        return found.queued if found is not None else 0

    async def acquire(self, pool_name: str, who: Classified) -> Lease:
        """A slot of ``pool_name`` for ``who``: at once, or after waiting its turn.

        FlowRefused when the band sheds, its queue is full, the wait runs out, or the pool
        holds as many requests as its upstreams' bound. A cancelled caller leaves the queue
        (or gives back the slot it was just granted).
        """
        lease = self.at_once(pool_name, who)
        return lease if lease is not None else await self.wait(pool_name, who)

    def at_once(self, pool_name: str, who: Classified) -> Lease | None:
        """A slot without waiting (a pool not flow-controlled gives FREE), or None.

        Every request comes here first: no coroutine, so the common case costs a lookup.
        """
        if who.ignored is not None:
            self.observer.ignored(pool_name, who.ignored)
        pool = self.pools.get(pool_name)
        if pool is None or pool.capacity is None:
            return FREE
        if pool.room(who.band) and (not pool.engine_queue
                                    or pool.in_engine_queue(who.band, who.group)):
            # nobody waits who could take it (dispatch's promise)
            self.observer.admitted(pool_name, who.band.name, 0.0)
            return pool.grant(who.band.name, who.group, who.member)
        return None

    async def wait(self, pool_name: str, who: Classified) -> Lease:
        """Queue for a slot of a full pool (``at_once`` said None): acquire's second half."""
        pool = self.pools[pool_name]
        band = who.band
        queued = pool.queued
        if band.sheddable:
            self.observer.refused(pool_name, band.name, "shed")
            raise FlowRefused(429, "request_shed", f"{pool_name!r} has no free slot and "
                              f"band {band.name!r} is sheddable: its requests are refused "
                              "instead of queued", pool.retry_after(queued))
        if pool.bound is not None and pool.in_flight + queued >= pool.bound:
            wait = pool.retry_after(queued)
            self._displace_or_refuse(
                pool, who, list(pool.queues.values()), code="model_overloaded",
                outcome="overloaded", full=f"{pool_name!r} is at capacity: its upstreams "
                f"take {pool.bound} requests at once, queued ones included", wait=wait)
        queue = pool.queue(band)
        if queue.size >= band.max_queue:
            self._displace_or_refuse(
                pool, who, [queue], code="queue_full", outcome="queue_full",
                full=f"the queue of band {band.name!r} for {pool_name!r} is full "
                f"({band.max_queue} requests, flowControl.bands[].maxQueue)",
                wait=pool.retry_after(queued))
        ticket = Ticket(who.group, who.member, self.clock(),
                         asyncio.get_running_loop().create_future())
        queue.push(ticket)
        self.observer.depth(pool_name, band.name, queue.size)
        try:
            done, _ = await asyncio.wait({ticket.future}, timeout=band.max_wait_seconds)
        except asyncio.CancelledError:  # the client left
            if ticket.future.done() and ticket.future.exception() is None:
                ticket.future.result().release()
            else:
                self._leave(pool, ticket, "cancelled")
            raise
        if not done:
            self._leave(pool, ticket, "timeout")
            raise FlowRefused(503, "queue_timeout", f"{pool_name!r} had no free slot for "
                              f"{band.max_wait_seconds:g} s (band {band.name!r}, "
                              "flowControl.bands[].maxWaitSeconds); retry later",
                              pool.retry_after(pool.queued))
        return ticket.future.result()

    def _displace_or_refuse(self, pool: Pool, who: Classified, queues: list[BandQueue], *,
                            code: str, outcome: str, full: str, wait: float) -> None:
        """At a bound, the fairness ID holding the most gives way.

        Its newest waiting request is refused in favour of ``who``'s, or ``who``'s is
        (raised) when ``who``'s ID holds the most. A bound that refused by arrival locked a
        light ID out while a heavy one refilled the queue as fast as it freed (fair queuing
        drops from the fattest flow, too). Both get 429 with Retry-After; ``full`` says
        which bound.
        """
        chosen = pool.displaceable(who, queues)
        if chosen is None:
            self.observer.refused(pool.name, who.band.name, outcome)
            raise FlowRefused(429, code, f"{full}, and your fairness ID holds the most of "
                              f"it (or only higher bands wait); retry after {wait:g}s", wait)
        queue, group, member = chosen
        ticket = queue.take_newest(group, member)
        ticket.future.set_exception(FlowRefused(
            429, code, f"{full}: your request waited and gave way to a lighter fairness "
            "ID's (at a bound the ID holding the most is refused, or a lower band); retry "
            f"after {wait:g}s", wait))
        self.observer.refused(pool.name, queue.band.name, "displaced")
        self.observer.depth(pool.name, queue.band.name, queue.size)

    def _leave(self, pool: Pool, ticket: Ticket, outcome: str) -> None:
        """Take a waiting request out of whichever band queue holds it now."""
        ticket.future.cancel()
        for queue in pool.queues.values():
            if queue.remove(ticket):
                self.observer.refused(pool.name, queue.band.name, outcome)
                self.observer.depth(pool.name, queue.band.name, queue.size)
                return
