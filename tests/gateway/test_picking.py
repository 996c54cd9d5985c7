"""Picking a replica: least load, and by prompt prefix with bounded load (pure, milliseconds)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from llm_operator.gateway.routing.holding import Holds
from llm_operator.gateway.routing.picking import (
    Load,
    PrefixIndex,
    least_loaded,
    prefix_blocks,
    prefix_cache_order,
    prefix_order,
    prefix_text,
)

NAMES = ["a", "b", "c"]


def loads(**busy: tuple[int, float]) -> dict[str, Load]:
    out = {n: Load() for n in NAMES}
    for name, (in_flight, waiting) in busy.items():
        out[name] = Load(in_flight=in_flight, waiting=waiting)
    return out


@pytest.mark.parametrize(("busy", "first"), [
    ({"a": (2, 0), "b": (1, 0), "c": (3, 0)}, "b"),
    ({"a": (0, 5), "b": (1, 0), "c": (3, 0)}, "b"),  # the engine's own queue counts
    ({"a": (1, 0), "b": (0, 2), "c": (0, 1)}, "a"),  # c: 0 + 1 ties a; rotation picks
])
def test_least_loaded_goes_to_the_fewest_requests_ahead(
        busy: dict[str, tuple[int, float]], first: str) -> None:
    assert least_loaded(NAMES, loads(**busy), turn=0)[0] == first


def test_the_engines_running_count_is_not_added_to_ours() -> None:
    both = Load(in_flight=3, running=3, waiting=1)  # our three are the engine's three
    assert both.busy == 4
    assert Load(in_flight=1, running=6).busy == 6  # other routers' requests count too


def test_ties_rotate_so_idle_replicas_share_the_requests() -> None:
    idle = loads()
    assert [least_loaded(NAMES, idle, turn)[0] for turn in range(6)] == \
        ["a", "b", "c", "a", "b", "c"]


def test_fuller_kv_caches_lose_ties() -> None:
    idle = loads()
    idle["a"] = Load(kv_usage=0.9)
    assert least_loaded(NAMES, idle, turn=0)[0] == "b"


CHAT = {"model": "m", "messages": [{"role": "system", "content": "You are terse."},
                                   {"role": "user", "content": [
                                       {"type": "text", "text": "Hello"},
                                       {"type": "image_url", "image_url": {"url": "x"}}]}]}


@pytest.mark.parametrize(("body", "chars", "text"), [
    (CHAT, 1000, "m\0system:You are terse.\nuser:Hello\n"),
    (CHAT, 10, "m\0system:You"),
    ({"model": "m", "prompt": "Once upon a time"}, 4, "m\0Once"),
    ({"model": "sql-adapter", "prompt": "Once"}, 4, "sql-adapter\0Once"),
    ({"prompt": 3}, 4, "\0"),
])
def test_the_prefix_is_the_model_then_the_text_an_engine_would_cache(
        body: dict[str, Any], chars: int, text: str) -> None:
    assert prefix_text(body, chars) == text


def test_a_prefix_keeps_its_replica_and_removing_one_moves_only_its_keys() -> None:
    idle = {n: Load() for n in ("a", "b", "c", "d")}
    keys = [f"prompt {i}" for i in range(400)]
    before = {k: prefix_order(k, list(idle), idle, 1.25)[0] for k in keys}
    assert before == {k: prefix_order(k, list(idle), idle, 1.25)[0] for k in keys}
    assert set(before.values()) == set(idle)  # spread over every replica
    del idle["d"]
    after = {k: prefix_order(k, list(idle), idle, 1.25)[0] for k in keys}
    moved = {k for k in keys if before[k] != after[k]}
    assert moved == {k for k in keys if before[k] == "d"}


def test_a_hot_prefix_spills_to_its_next_replica_over_the_bound() -> None:
    key = "the same long system prompt"
    idle = {n: Load() for n in NAMES}
    own, second = prefix_order(key, NAMES, idle, 1.25)[:2]
    hot = dict(idle)
    hot[own] = Load(in_flight=4)  # 4 of 5 in flight would be its, cap ceil(1.25 x 5/3) = 3
    assert prefix_order(key, NAMES, hot, 1.25)[0] == second
    even = {n: Load(in_flight=1) for n in NAMES}  # cap ceil(1.25 x 4/3) = 2: within it
    assert prefix_order(key, NAMES, even, 1.25)[0] == own


SYSTEM = "You answer questions about our product. " * 20  # 840 characters: 3 whole blocks


def prompt(system: str, *turns: str) -> str:
    """The prompt text the router indexes: the system prompt, then alternating turns."""
    roles = ("user", "assistant")
    body = {"model": "m", "messages": [{"role": "system", "content": system}, *(
        {"role": roles[i % 2], "content": t} for i, t in enumerate(turns))]}
    return prefix_text(body, 32_768)


def test_blocks_name_every_beginning_and_diverge_where_prompts_do() -> None:
    one, two = prefix_blocks(prompt(SYSTEM, "first")), prefix_blocks(prompt(SYSTEM, "second"))
    assert one == two and len(one) == 3  # only whole blocks, all inside the system prompt
    longer = prefix_blocks(prompt(SYSTEM, "q " * 200))
    assert longer[:3] == one and len(longer) == 4
    assert prefix_blocks("x" * 511) == prefix_blocks("x" * 256)
    assert prefix_blocks("") == []


def test_the_index_counts_leading_blocks_and_a_conversations_last_turn() -> None:
    index = PrefixIndex(capacity=8)
    index.record(prompt(SYSTEM, "q1"), "a")
    index.record(prompt(SYSTEM, "other user's q1"), "b")
    # the next turn extends a's prompt within its partial block: half a block more
    assert index.matched(prompt(SYSTEM, "q1", "answer", "q2"), ["a", "b", "c"]) == {
        "a": 3.5, "b": 3.0, "c": 0.0}
    index.record(prompt("another system prompt entirely " * 60), "c")  # 7 more blocks
    assert index.matched(prompt(SYSTEM, "q1"), ["a", "b"]) == {"a": 0.0, "b": 0.0}
    for n in range(50):  # bounded whatever it is sent: 8 blocks, 8 // 4 partial blocks
        index.record(prompt(f"tenant {n} " * 100, "q"), "a")
    assert len(index) == 8 + 2


def test_prefix_cache_follows_the_conversation_and_spreads_what_everyone_holds() -> None:
    names = ["a", "b", "c", "d"]
    index = PrefixIndex()
    idle = {n: Load() for n in names}
    first = prefix_cache_order(prompt(SYSTEM, "hello"), names, idle, 2.0, index)[0]
    # the next turn carries the first one: the replica that saw it holds the most
    assert prefix_cache_order(prompt(SYSTEM, "hello", "hi!", "and then?"), names, idle, 2.0,
                              index)[0] == first
    # busy with other work, it still wins while within the bound ...
    busy = {n: Load(in_flight=2 if n == first else 1) for n in names}  # cap: ceil(2 x 6/4)
    assert prefix_cache_order(prompt(SYSTEM, "hello", "hi!", "more"), names, busy, 2.0,
                              index)[0] == first
    # ... and a new conversation on the same system prompt goes there too, the only holder
    assert prefix_cache_order(prompt(SYSTEM, "other user"), names, busy, 2.0,
                              index)[0] == first
    # over the bound, another replica takes it and from then on holds the system prompt too
    over = {**idle, first: Load(in_flight=3)}  # cap ceil(2 x 4/4) = 2
    second = prefix_cache_order(prompt(SYSTEM, "third user"), names, over, 2.0, index)[0]
    assert second != first
    held = index.matched(prompt(SYSTEM, "anyone"), names)
    assert held[second] == held[first] == 3  # the system prompt's whole blocks
    # once both hold it, the system prompt goes to the less loaded of the two
    lighter = {**idle, first: Load(in_flight=1)}
    assert prefix_cache_order(prompt(SYSTEM, "fourth user"), names, lighter, 2.0,
                              index)[0] == second


def test_prefix_cache_spreads_new_prompts_by_load_then_by_hash() -> None:
    names = ["a", "b", "c"]
    loaded = {"a": Load(in_flight=2), "b": Load(in_flight=0), "c": Load(in_flight=1)}
    assert prefix_cache_order(prompt("new tenant"), names, loaded, 2.0,
                              PrefixIndex())[0] == "b"
    idle = {n: Load() for n in names}
    firsts = {prefix_cache_order(prompt(f"tenant {i}"), names, idle, 2.0, PrefixIndex())[0]
              for i in range(30)}
    assert firsts == set(names)


async def test_held_requests_are_released_in_arrival_order_and_bounded() -> None:
    counts: list[tuple[str, int]] = []
    holds = Holds(per_route=3, total=4, on_change=lambda label, n: counts.append((label, n)))
    woken: list[int] = []

    async def wait(i: int) -> None:
        async with holds.holding("m"):
            assert await holds.wait("m", 5)
            woken.append(i)

    tasks = []
    for i in range(3):
        tasks.append(asyncio.create_task(wait(i)))
        await asyncio.sleep(0)  # each one reaches its wait before the next starts
    assert holds.refusal("m") == "3 requests are already waiting for it"
    async with holds.holding("other"):
        assert holds.refusal("third") == "4 requests are already waiting for models"
    holds.release("m")
    await asyncio.gather(*tasks)
    assert woken == [0, 1, 2]
    assert holds.held == {} and counts[-1] == ("m", 0)
    assert await holds.wait("m", 0.01) is False  # nobody released it: the timeout ends it
