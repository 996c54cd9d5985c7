"""Flow control's queue: strict priority between bands, fair shares within one, bounds."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from llm_operator.gateway.flow.bands import Classified
from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.flow.queue import FlowObserver, FlowRefused, Lease, Sizes
from llm_operator.gateway.settings.flow_control import Band, FlowControl

SETTINGS = FlowControl()
# the default bands with the batch band at its fixed share alone (reserveSeconds 0)
CAPPED = FlowControl.model_validate({"bands": [
    {"name": "interactive", "priority": 100},
    {"name": "standard", "priority": 0},
    {"name": "batch", "priority": -100, "maxShare": 0.5, "reserveSeconds": 0}]})


def band(name: str, settings: FlowControl = SETTINGS) -> Band:
    found = settings.band(name)
    assert found is not None
    return found


def who(band_name: str = "standard", group: str = "", member: str = "",
        settings: FlowControl = SETTINGS) -> Classified:
    return Classified(band(band_name, settings), group, member)


class Seen(FlowObserver):
    """Records what flow control reports."""

    def __init__(self) -> None:
        self.depths: dict[tuple[str, str], int] = {}
        self.outcomes: list[tuple[str, str]] = []

    def depth(self, pool: str, band: str, queued: int) -> None:
        self.depths[(pool, band)] = queued

    def admitted(self, pool: str, band: str, waited: float) -> None:
        self.outcomes.append((band, "admitted"))

    def refused(self, pool: str, band: str, outcome: str) -> None:
        self.outcomes.append((band, outcome))


def flow(slots: int | None = 1, bound: int | None = None,
         settings: FlowControl = SETTINGS) -> tuple[Flow, Seen]:
    seen = Seen()
    out = Flow(settings, clock=lambda: 0.0, observer=seen)
    out.configure(settings, {"m": (slots, bound)})
    return out, seen


async def queued(f: Flow, count: int, pool: str = "m") -> None:
    """Until ``count`` requests wait in ``pool`` (the waiters run on this loop)."""
    async with asyncio.timeout(5):
        while f.queued(pool) != count:
            await asyncio.sleep(0)


class Waiters:
    """Requests queued in arrival order; ``granted`` lists their names as slots come."""

    def __init__(self, f: Flow) -> None:
        self.flow = f
        self.granted: list[str] = []
        self.leases: dict[str, Lease] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def add(self, name: str, request: Classified) -> None:
        async def wait() -> None:
            self.leases[name] = await self.flow.acquire("m", request)
            self.granted.append(name)
        before = self.flow.queued("m")
        self.tasks.append(asyncio.create_task(wait()))
        await queued(self.flow, before + 1)

    async def settle(self, count: int) -> None:
        """Until ``count`` waiters have their slot (they resume on this loop)."""
        async with asyncio.timeout(5):
            while len(self.granted) < count:
                await asyncio.sleep(0)

    async def release(self, name: str) -> None:
        """Give back ``name``'s slot; the next waiter (if any) takes it."""
        count = len(self.granted)
        self.leases[name].release()
        if self.flow.queued("m") < self.waiting(count):
            await self.settle(count + 1)

    def waiting(self, granted: int) -> int:
        return len(self.tasks) - granted


async def test_a_freed_slot_goes_to_the_highest_band_whatever_the_arrival_order() -> None:
    f, _ = flow(slots=1)
    first = await f.acquire("m", who())
    waiters = Waiters(f)
    for name in ("batch", "standard", "interactive"):
        await waiters.add(name, who(name))
    first.release()
    await waiters.settle(1)
    for name in ("interactive", "standard"):
        await waiters.release(name)
    assert waiters.granted == ["interactive", "standard", "batch"]


@pytest.mark.parametrize(("slots", "max_share", "held"), [
    (4, 0.5, 2), (5, 0.5, 2), (8, 0.25, 2), (1, 0.5, 1), (3, 0.1, 1), (3, 1.0, 3),
], ids=["half-of-4", "half-of-5", "quarter-of-8", "one-slot-is-still-used",
        "at-least-one", "no-cap"])
async def test_a_band_holds_at_most_its_share_of_the_slots(
        slots: int, max_share: float, held: int) -> None:
    settings = FlowControl.model_validate({"bands": [
        {"name": "interactive", "priority": 100},
        {"name": "standard", "priority": 0},
        {"name": "batch", "priority": -100, "maxShare": max_share, "reserveSeconds": 0}]})
    f, _ = flow(slots=slots, settings=settings)
    capped = settings.band("batch")
    assert capped is not None
    batch = Classified(capped, "", "")
    got = [lease for _ in range(slots) if (lease := f.at_once("m", batch)) is not None]
    assert len(got) == held


# 8 slots, the default batch band (maxShare 0.5 with reserveSeconds 60): interactive
# requests held at once at second 0, then given back; how many slots batch requests take
# at once ``later`` seconds afterwards. Beyond its half, batch work takes what the
# interactive band has not needed lately: the engine stays full, with room for the
# traffic above.
RESERVING = FlowControl()


def test_the_default_batch_band_keeps_room_for_the_recent_peak_above_it() -> None:
    assert (band("batch").max_share, band("batch").reserve_seconds) == (0.5, 60)


@pytest.mark.parametrize(("interactive", "given_back", "later", "batch"), [
    (0, 0, 0.0, 8),  # no higher traffic seen: every slot
    (2, 0, 0.0, 6),  # two running: all but theirs
    (2, 2, 30.0, 6),  # two a while ago: their room is kept
    (2, 2, 130.0, 8),  # two long ago (past twice reserveSeconds): forgotten
    (6, 0, 0.0, 2),  # six running: the two slots left
    (6, 6, 30.0, 4),  # six a while ago: maxShare's half, not less
    (1, 1, 30.0, 7),
], ids=["none-seen", "two-running", "two-lately", "two-long-ago", "six-running",
        "six-lately-keeps-maxshare", "one-lately"])
async def test_beyond_its_share_a_band_takes_what_the_bands_above_left_unused(
        interactive: int, given_back: int, later: float, batch: int) -> None:
    now = [0.0]
    f = Flow(RESERVING, clock=lambda: now[0])
    f.configure(RESERVING, {"m": (8, None)})
    chat_band, _, batch_band = RESERVING.bands
    chat = [f.at_once("m", Classified(chat_band, "", "")) for _ in range(interactive)]
    for lease in chat[:given_back]:
        assert lease is not None
        lease.release()
    now[0] = later
    got = [lease for _ in range(8)
           if (lease := f.at_once("m", Classified(batch_band, "", ""))) is not None]
    assert len(got) == batch


async def test_slots_kept_from_batch_work_go_to_a_higher_band_at_once() -> None:
    f, _ = flow(slots=4, settings=CAPPED)  # the batch band holds 2 of the 4 slots
    capped, chatting = who("batch", settings=CAPPED), who("interactive", settings=CAPPED)
    batch = [await f.acquire("m", capped) for _ in range(2)]
    waiters = Waiters(f)
    await waiters.add("batch2", capped)  # waits although two slots are free
    chat = [f.at_once("m", chatting) for _ in range(2)]
    assert all(lease is not None for lease in chat) and waiters.granted == []
    assert f.at_once("m", chatting) is None  # now every slot is busy
    for lease in chat:
        assert lease is not None
        lease.release()
    assert f.queued("m") == 1  # freed interactive slots are not the batch band's
    batch[0].release()
    await waiters.settle(1)  # a batch slot freed: the next batch request takes it
    assert waiters.granted == ["batch2"]


async def test_an_idle_band_waits_until_higher_bands_have_been_quiet_for_its_time() -> None:
    settings = FlowControl.model_validate({"bands": [
        {"name": "interactive", "priority": 100},
        {"name": "standard", "priority": 0},
        {"name": "batch", "priority": -100, "idleSeconds": 0.05}]})
    f = Flow(settings, clock=time.monotonic)
    f.configure(settings, {"m": (4, None)})
    chat, _, batch = (Classified(b, "", "") for b in settings.bands)
    first = f.at_once("m", batch)
    assert first is not None  # no higher band seen yet: at once
    lease = f.at_once("m", chat)
    assert lease is not None
    waiters = Waiters(f)
    await waiters.add("batch1", batch)  # a slot is free, but a chat request is in flight
    lease.release()
    ended = time.monotonic()
    assert f.queued("m") == 1  # and ended just now
    await waiters.settle(1)  # the pool's timer, once the chat band has been quiet
    assert time.monotonic() - ended >= 0.05
    assert f.at_once("m", chat) is not None  # a higher band is never held back


async def test_one_id_is_served_first_come_first_served() -> None:
    f, _ = flow(slots=1)
    first = await f.acquire("m", who())
    waiters = Waiters(f)
    for name in ("a1", "a2", "a3"):
        await waiters.add(name, who(group="a"))
    first.release()
    await waiters.settle(1)
    for name in ("a1", "a2"):
        await waiters.release(name)
    assert waiters.granted == ["a1", "a2", "a3"]


async def test_a_light_id_gets_the_next_slots_while_a_heavy_one_holds_the_rest() -> None:
    f, _ = flow(slots=4)
    heavy = [await f.acquire("m", who(group="heavy")) for _ in range(4)]
    waiters = Waiters(f)
    for index in range(10):
        await waiters.add(f"heavy{index}", who(group="heavy"))
    await waiters.add("light0", who(group="light"))
    await waiters.add("light1", who(group="light"))
    heavy[0].release()
    heavy[1].release()
    await waiters.settle(2)
    # both light requests went first: heavy held 3 slots, then light 1 and heavy 3
    assert waiters.granted == ["light0", "light1"]


async def test_within_a_key_its_members_share_fairly() -> None:
    f, _ = flow(slots=2)
    held = [await f.acquire("m", who(group="team", member="bulk")) for _ in range(2)]
    waiters = Waiters(f)
    for index in range(3):
        await waiters.add(f"bulk{index}", who(group="team", member="bulk"))
    await waiters.add("alice", who(group="team", member="alice"))
    held[0].release()
    await waiters.settle(1)
    assert waiters.granted == ["alice"]


ONE_BAND = [Band(name="standard", priority=0)]


@pytest.mark.parametrize(("bands", "bound", "status", "code", "outcome"), [
    ([Band(name="standard", priority=0, sheddable=True)], None, 429, "request_shed", "shed"),
    ([Band(name="standard", priority=0, max_queue=1)], None, 429, "queue_full",
     "queue_full"),
    (ONE_BAND, 2, 429, "model_overloaded", "overloaded"),
], ids=["sheddable-band", "queue-full", "upstreams-bound"])
async def test_a_request_that_cannot_wait_is_refused_at_once(
        bands: list[Band], bound: int | None, status: int, code: str, outcome: str) -> None:
    # engineQueue 1: a band that only sheds needs one (the slot counts below are given)
    settings = FlowControl(bands=bands, engine_queue=1)
    f, seen = flow(1, bound, settings)
    request = Classified(settings.bands[0], "")
    await f.acquire("m", request)
    waiting: list[asyncio.Task[Lease]] = []
    if not settings.bands[0].sheddable:  # one waits already
        waiting.append(asyncio.create_task(f.acquire("m", request)))
        await queued(f, 1)
    with pytest.raises(FlowRefused) as refused:
        await f.acquire("m", request)
    assert (refused.value.status, refused.value.code) == (status, code)
    assert refused.value.retry_after >= 1
    assert seen.outcomes[-1] == ("standard", outcome)
    for task in waiting:
        task.cancel()
    await asyncio.gather(*waiting, return_exceptions=True)


SMALL_QUEUE = FlowControl(bands=[Band(name="interactive", priority=100, max_queue=3),
                                  Band(name="standard", priority=0, max_queue=3),
                                  Band(name="batch", priority=-100, max_queue=3)])


# One slot, held by ID "holder"; the requests queued in order as (name, band, group,
# member); the newcomer's band and group; the queued request that gives way to it (None:
# the newcomer is refused) and the code both read.
@pytest.mark.parametrize(("bound", "queued_before", "newcomer", "gives_way", "code"), [
    # the pool's bound (the upstreams' maxConcurrent): 1 running + 3 waiting
    (4, [("h1", "standard", "heavy", ""), ("h2", "standard", "heavy", ""),
         ("h3", "standard", "heavy", "")], ("standard", "light"), "h3", "model_overloaded"),
    (4, [("h1", "standard", "heavy", ""), ("h2", "standard", "heavy", ""),
         ("l1", "standard", "light", "")], ("standard", "heavy"), None, "model_overloaded"),
    (4, [("a1", "standard", "a", ""), ("a2", "standard", "a", ""),
         ("b1", "standard", "b", "")], ("standard", "b"), None, "model_overloaded"),
    (4, [("b1", "batch", "light", ""), ("s1", "standard", "heavy", ""),
         ("s2", "standard", "heavy", "")], ("standard", "heavy"), "b1", "model_overloaded"),
    (4, [("i1", "interactive", "x", ""), ("i2", "interactive", "x", ""),
         ("i3", "interactive", "x", "")], ("standard", "light"), None, "model_overloaded"),
    (4, [("t1", "standard", "team", "bulk"), ("t2", "standard", "team", "bulk"),
         ("t3", "standard", "team", "alice")], ("standard", "light"), "t2",
     "model_overloaded"),
    # a band's maxQueue (3): only its own queue gives way
    (None, [("h1", "standard", "heavy", ""), ("h2", "standard", "heavy", ""),
            ("h3", "standard", "heavy", "")], ("standard", "light"), "h3", "queue_full"),
    (None, [("b1", "batch", "light", ""), ("h1", "standard", "heavy", ""),
            ("h2", "standard", "heavy", ""), ("h3", "standard", "heavy", "")],
     ("standard", "heavy"), None, "queue_full"),
], ids=["light-displaces-heavy", "heavy-refused", "equal-ids-no-churn", "lower-band-first",
        "higher-band-never", "heaviest-member", "band-queue-light", "band-queue-own-only"])
async def test_at_a_bound_the_id_holding_the_most_gives_way(
        bound: int | None, queued_before: list[tuple[str, str, str, str]],
        newcomer: tuple[str, str], gives_way: str | None, code: str) -> None:
    f, seen = flow(1, bound, SMALL_QUEUE)
    pick = {b.name: b for b in SMALL_QUEUE.bands}
    await f.acquire("m", Classified(pick["standard"], "holder"))
    tasks = {}
    for name, band_name, group, member in queued_before:
        tasks[name] = asyncio.create_task(
            f.acquire("m", Classified(pick[band_name], group, member)))
        await queued(f, len(tasks))
    new_band, new_group = newcomer
    arriving = asyncio.create_task(f.acquire("m", Classified(pick[new_band], new_group)))
    await asyncio.wait([arriving, *tasks.values()], timeout=5,
                       return_when=asyncio.FIRST_COMPLETED)
    if gives_way is None:
        refused = arriving.exception()
        assert seen.outcomes[-1][1] in ("overloaded", "queue_full")
        assert not any(t.done() for t in tasks.values())
    else:
        assert not arriving.done()  # it waits in the place given up
        done = [n for n, t in tasks.items() if t.done()]
        assert done == [gives_way]
        refused = tasks[gives_way].exception()
        assert ("displaced" in {o for _, o in seen.outcomes})
        assert f.queued("m") == len(queued_before)
    assert isinstance(refused, FlowRefused)
    assert (refused.status, refused.code) == (429, code)
    assert refused.retry_after >= 1 and "fairness ID" in refused.message
    for task in [arriving, *tasks.values()]:
        task.cancel()
    await asyncio.gather(arriving, *tasks.values(), return_exceptions=True)


async def test_a_light_id_beside_a_heavy_one_that_fills_every_bound_is_served() -> None:
    """#51: 40 heavy clients refilled slots and bound as fast as they freed, and each of
    the light ID's requests was refused on arrival (0 of 390 answered)."""
    f, _ = flow(slots=2, bound=4)
    heavy_band = band("standard")
    running = [await f.acquire("m", Classified(heavy_band, "heavy")) for _ in range(2)]
    backlog = [asyncio.create_task(f.acquire("m", Classified(heavy_band, "heavy")))
               for _ in range(2)]
    await queued(f, 2)
    light = asyncio.create_task(f.acquire("m", Classified(heavy_band, "light")))
    await asyncio.wait(backlog, timeout=5, return_when=asyncio.FIRST_COMPLETED)
    assert f.queued("m") == 2  # one heavy request gave way to the light one
    running[0].release()
    lease = await asyncio.wait_for(light, 5)
    assert lease.group == "light"
    lease.release()  # the heavy request still waiting gets its turn
    results = await asyncio.wait_for(asyncio.gather(*backlog, return_exceptions=True), 5)
    assert sorted(type(r).__name__ for r in results) == ["FlowRefused", "Lease"]


async def test_a_request_that_waits_past_its_band_limit_gets_503_and_leaves_the_queue() -> None:
    settings = FlowControl(bands=[Band(name="standard", priority=0, max_wait_seconds=0.05)])
    f, seen = flow(1, None, settings)
    await f.acquire("m", Classified(settings.bands[0], ""))
    with pytest.raises(FlowRefused) as refused:
        await f.acquire("m", Classified(settings.bands[0], ""))
    assert (refused.value.status, refused.value.code) == (503, "queue_timeout")
    assert "maxWaitSeconds" in refused.value.message
    assert f.queued("m") == 0
    assert seen.outcomes[-1] == ("standard", "timeout")


async def test_a_client_that_leaves_while_queued_is_removed_at_once() -> None:
    f, seen = flow(slots=1)
    first = await f.acquire("m", who())
    leaving = asyncio.create_task(f.acquire("m", who(group="gone")))
    await queued(f, 1)
    staying = asyncio.create_task(f.acquire("m", who(group="stays")))
    await queued(f, 2)
    leaving.cancel()
    await asyncio.gather(leaving, return_exceptions=True)
    assert f.queued("m") == 1
    assert ("standard", "cancelled") in seen.outcomes
    first.release()
    lease = await staying
    assert lease.group == "stays"
    assert f.pools["m"].in_flight == 1


async def test_a_slot_granted_to_a_client_that_just_left_is_given_back() -> None:
    f, _ = flow(slots=1)
    first = await f.acquire("m", who())
    leaving = asyncio.create_task(f.acquire("m", who()))
    await queued(f, 1)
    first.release()  # granted to the waiter, which is cancelled before it runs
    leaving.cancel()
    await asyncio.gather(leaving, return_exceptions=True)
    assert f.pools["m"].in_flight == 0


async def test_new_replicas_take_waiting_requests_and_a_removed_model_refuses_them() -> None:
    f, _ = flow(slots=1)
    await f.acquire("m", who())
    waiting = [asyncio.create_task(f.acquire("m", who())) for _ in range(3)]
    await queued(f, 3)
    f.configure(SETTINGS, {"m": (2, None)})  # a second replica
    await queued(f, 2)
    f.configure(SETTINGS, {})  # the model is gone
    results = await asyncio.gather(*waiting, return_exceptions=True)
    refused = [r for r in results if isinstance(r, FlowRefused)]
    assert [(r.status, r.code) for r in refused] == [(503, "model_unavailable")] * 2


async def test_requests_of_a_band_removed_from_the_settings_wait_in_the_default_band() -> None:
    f, _ = flow(slots=1)
    first = await f.acquire("m", who())
    moved = asyncio.create_task(f.acquire("m", who("batch")))
    await queued(f, 1)
    fewer = FlowControl(bands=[b for b in SETTINGS.bands if b.name != "batch"])
    f.configure(fewer, {"m": (1, None)})
    assert f.pools["m"].queues["standard"].size == 1
    first.release()
    assert (await moved).group == ""


async def test_a_pool_without_known_slots_is_not_flow_controlled() -> None:
    f, seen = flow(slots=None)
    leases = [await f.acquire("m", who()) for _ in range(100)]
    assert f.queued("m") == 0 and seen.outcomes == []
    for lease in leases:
        lease.release()


async def test_flow_control_off_lets_everything_through() -> None:
    off = FlowControl(enabled=False)
    f, _ = flow(slots=1, settings=off)
    leases: list[Any] = [await f.acquire("m", who()) for _ in range(5)]
    assert len(leases) == 5 and f.queued("m") == 0


# Two slots and an engine queue of two (capacity 4): the requests already out as (band,
# fairness ID); the newcomer's; whether it goes at once (beyond the slots: into an engine's
# queue) or waits here for a slot.
@pytest.mark.parametrize(("out", "newcomer", "at_once"), [
    ([("standard", "a")] * 2, ("standard", "a"), True),
    ([("standard", "a")] * 3, ("standard", "a"), True),
    ([("standard", "a"), ("standard", "b")], ("standard", "a"), True),
    ([("standard", "a")] * 2 + [("standard", "b")], ("standard", "a"), False),
    ([("standard", "a")] * 2 + [("standard", "b")], ("standard", "b"), True),
    ([("interactive", "a"), ("standard", "b")], ("standard", "b"), False),
    ([("standard", "a"), ("standard", "b")], ("interactive", "c"), True),
    ([("batch", "a")], ("batch", "a"), False),  # maxShare 0.5 of 2 slots, not of 4
    ([("standard", "a")], ("batch", "a"), True),  # a slot is free: whoever
], ids=["one-id", "one-id-up-to-capacity", "two-ids-within-share",
        "an-id-at-its-share-waits", "the-lighter-id-goes", "a-higher-band-runs",
        "the-highest-band-goes", "a-bands-share-is-of-the-slots", "a-free-slot"])
async def test_beyond_the_slots_only_what_flow_control_sends_next_goes_to_an_engine(
        out: list[tuple[str, str]], newcomer: tuple[str, str], at_once: bool) -> None:
    f = Flow(CAPPED, clock=lambda: 0.0)
    f.configure(CAPPED, {"m": (4, None, 2)})
    for band_name, group in out:
        assert f.at_once("m", who(band_name, group, settings=CAPPED)) is not None
    assert (f.at_once("m", who(*newcomer, settings=CAPPED)) is not None) == at_once


async def test_an_id_at_its_share_waits_for_a_slot_and_a_lighter_one_goes_ahead() -> None:
    f = Flow(SETTINGS, clock=lambda: 0.0)
    f.configure(SETTINGS, {"m": (4, None, 2)})
    heavy = [await f.acquire("m", who(group="heavy")) for _ in range(2)]  # the slots
    light = await f.acquire("m", who(group="light"))  # beyond them: its share
    waiters = Waiters(f)
    await waiters.add("heavy-next", who(group="heavy"))  # the engine queue has room
    assert f.at_once("m", who(group="other")) is not None  # a lighter ID goes at once
    heavy[0].release()
    await waiters.settle(1)
    assert waiters.granted == ["heavy-next"]
    light.release()
    f.resize({"m": Sizes(2, None, 0)})  # the engine queue gone: nothing more goes
    assert f.at_once("m", who(group="light")) is None


async def test_a_lower_band_stays_out_of_the_engine_queue_between_a_higher_bands_requests(
        ) -> None:
    """A closed-loop interactive client is gone for a moment between two requests: batch
    work does not fill the engine queue in that gap (within a slot's average hold)."""
    now = [0.0]
    f = Flow(SETTINGS, clock=lambda: now[0])
    f.configure(SETTINGS, {"m": (4, None, 2)})
    standard = [f.at_once("m", who("standard")) for _ in range(2)]  # the slots
    interactive = f.at_once("m", who("interactive"))
    assert interactive is not None and None not in standard
    now[0] = 2.0
    interactive.release()  # held 2 s: the average hold
    now[0] = 3.0
    assert f.at_once("m", who("standard")) is None  # 1 s after: it may come back
    now[0] = 4.5
    assert f.at_once("m", who("standard")) is not None  # 2.5 s after: gone
