"""The reconcile queue: each key once, one worker per key, nothing lost, retries back off."""

from __future__ import annotations

import asyncio

from llm_operator.operator.workqueue import WorkQueue


async def test_a_key_added_twice_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a"):
        queue.add(key)
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_a_key_added_while_held_comes_back_after_done_not_before() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    held = await queue.get()
    queue.add("a")  # a change while a worker reconciles "a"
    assert len(queue) == 0 and queue.in_flight == 1  # no second worker on "a"
    queue.done(held)
    assert len(queue) == 1 and await queue.get() == "a"


async def test_retries_back_off_exponentially_and_forget_resets() -> None:
    queue: WorkQueue[str] = WorkQueue(base=0.01, cap=0.04)
    delays = [queue.retry("a") for _ in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.04]
    assert await asyncio.wait_for(queue.get(), 1) == "a"  # the earliest timer fired
    queue.forget("a")
    assert queue.retry("a") == 0.01
    queue.close()


async def test_a_dropped_key_is_not_retried() -> None:
    queue: WorkQueue[str] = WorkQueue(base=0.01)
    queue.retry("gone")
    assert queue.scheduled == 1
    queue.drop("gone")
    assert queue.scheduled == 0


async def test_an_earlier_retry_wins_over_a_later_one() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", 60)
    queue.add_after("a", 0.01)
    queue.add_after("a", 30)  # later than the pending one: ignored
    assert queue.scheduled == 1
    assert await asyncio.wait_for(queue.get(), 1) == "a"
