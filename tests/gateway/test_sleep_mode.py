"""Engines that take turns on one accelerator: vLLM's sleep mode behind the gateway.

Fake vLLM servers (tests/fake_vllm.py) share an Accelerator that holds a set number of
them awake, as a GPU's memory would: a wake beyond it fails with CUDA out of memory, and a
sleep under a running request fails too. The gateway must never cause either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.routing.sleepers import Engine, SleepGroup
from llm_operator.gateway.settings.config import ConfigError, parse_config

from fake_vllm import Accelerator, FakeVllm


@pytest.fixture
async def engines() -> AsyncIterator[list[FakeVllm]]:
    started: list[FakeVllm] = []
    yield started
    for engine in started:
        await engine.stop()


async def on(engines: list[FakeVllm], accelerator: Accelerator | None, names: list[str],
             awake: int) -> list[FakeVllm]:
    """Engines for ``names``, the first ``awake`` of them awake (as a launcher leaves them)."""
    for i, name in enumerate(names):
        engine = FakeVllm(name, accelerator, asleep=accelerator is not None and i >= awake)
        await engine.start()
        engines.append(engine)
    return engines


def route(engine: FakeVllm, max_awake: int, group: str = "gpu-0", **policy: Any
          ) -> dict[str, Any]:
    return {"name": engine.base_model, "models": [engine.base_model],
            "upstream": {"baseUrl": f"{engine.url}/v1", "auth": "none"},
            "sleep": {"group": group, "maxAwake": max_awake, **policy}}


async def gateway(routes: list[dict[str, Any]], **options: Any
                  ) -> tuple[TestClient[Any, Any], Gateway]:
    """The gateway as `llmop gateway` serves it: a client that leaves cancels its handler."""
    gw = Gateway(parse_config({"routes": routes}), **options)
    client: TestClient[Any, Any] = TestClient(TestServer(gw.app(), host="127.0.0.1",
                                                         handler_cancellation=True))
    await client.start_server()
    return client, gw


async def ask(client: TestClient[Any, Any], model: str, *, stream: bool = False
              ) -> tuple[int, str]:
    resp = await client.post("/v1/chat/completions", json={
        "model": model, "stream": stream,
        "messages": [{"role": "user", "content": "hello"}]})
    return resp.status, await resp.text()


# (case, maxAwake, the models asked for in turn, the accelerator's changes)
TURNS = [
    ("one awake at a time", 1, ["a", "b", "c", "a"],
     [("sleep", "a"), ("wake", "b"), ("sleep", "b"), ("wake", "c"), ("sleep", "c"),
      ("wake", "a")]),
    ("two awake: the least recently used sleeps", 2, ["a", "b", "c", "b", "a"],
     [("sleep", "a"), ("wake", "c"), ("sleep", "c"), ("wake", "a")]),
    ("awake ones answer without a change", 2, ["b", "a", "b", "a"], []),
]


@pytest.mark.parametrize(("case", "max_awake", "asked", "changes"), TURNS,
                         ids=[t[0] for t in TURNS])
async def test_an_engine_asleep_is_woken_after_the_least_recently_used_sleeps(
        engines: list[FakeVllm], case: str, max_awake: int, asked: list[str],
        changes: list[tuple[str, str]]) -> None:
    accelerator = Accelerator(holds=max_awake)
    fakes = await on(engines, accelerator, ["a", "b", "c"], awake=max_awake)
    client, gw = await gateway([route(f, max_awake) for f in fakes])
    try:
        for model in asked:
            status, text = await ask(client, model)
            assert status == 200 and f"answered by {model}" in text, text
        assert accelerator.changes == changes
        assert accelerator.most <= max_awake
        counted = gw.metrics.registry.get_sample_value(
            "llmop_gateway_engine_sleep_changes_total",
            {"group": "gpu-0", "action": "wake", "outcome": "ok"}) or 0
        assert counted == sum(1 for action, _ in changes if action == "wake")
        scraped = await (await client.get("/metrics")).text()
        awake = {f.base_model for f in fakes if not f.sleeping}
        for fake in fakes:  # which engines are awake now, as the accelerator has them
            line = (f'llmop_gateway_engine_awake{{group="gpu-0",upstream="{fake.url}/v1"}} '
                    f'{1.0 if fake.base_model in awake else 0.0}')
            assert line in scraped, scraped[-2000:]
    finally:
        await client.close()


async def until_draining(gw: Gateway, url: str) -> None:
    """Until the group takes no new request into ``url``: a wake waits for it to be idle."""
    async with asyncio.timeout(10):
        while gw.sleepers.groups["gpu-0"].engines[url].state != "draining":
            await asyncio.sleep(0)  # the handlers run on this loop: yield to them


async def test_an_engine_serving_a_stream_sleeps_only_once_it_ends(
        engines: list[FakeVllm]) -> None:
    accelerator = Accelerator(holds=1)
    a, b = await on(engines, accelerator, ["a", "b"], awake=1)
    a.hold = asyncio.Event()  # a's answer waits until the test lets it go
    client, gw = await gateway([route(a, 1), route(b, 1)])
    try:
        streamed = asyncio.create_task(ask(client, "a", stream=True))
        async with asyncio.timeout(10):
            await a.arrived.wait()
        for_b = asyncio.create_task(ask(client, "b"))
        await until_draining(gw, f"{a.url}/v1")  # b's request waits for a's stream to end
        assert not for_b.done() and accelerator.changes == []
        a.hold.set()
        assert (await streamed)[0] == 200
        status, text = await for_b
        assert status == 200 and "answered by b" in text
        assert accelerator.changes == [("sleep", "a"), ("wake", "b")]
    finally:
        await client.close()


async def test_a_client_that_leaves_during_a_wake_leaves_the_group_within_its_bound(
        engines: list[FakeVllm]) -> None:
    """The engine may finish waking anyway: the gateway asks it again before the next
    change, rather than counting it asleep and waking another beside it."""
    accelerator = Accelerator(holds=1)
    a, b, c = await on(engines, accelerator, ["a", "b", "c"], awake=1)
    b.wake_gate = asyncio.Event()
    client, gw = await gateway([route(f, 1) for f in (a, b, c)])
    try:
        leaving = asyncio.create_task(ask(client, "b"))
        async with asyncio.timeout(10):
            await b.wake_asked.wait()
        leaving.cancel()  # the client leaves while b wakes
        engine = gw.sleepers.groups["gpu-0"].engines[f"{b.url}/v1"]
        async with asyncio.timeout(10):
            while engine.state == "changing":
                await asyncio.sleep(0)  # the handler runs on this loop: yield to it
        b.wake_gate.set()  # b finishes waking all the same
        for model in ("c", "a", "b"):
            status, text = await ask(client, model)
            assert status == 200 and f"answered by {model}" in text, text
        assert accelerator.most <= 1
    finally:
        await client.close()


async def test_an_engine_without_sleep_mode_answers_503_saying_how_to_start_it(
        engines: list[FakeVllm]) -> None:
    accelerator = Accelerator(holds=1)
    (a,) = await on(engines, accelerator, ["a"], awake=1)
    (plain,) = (await on(engines, None, ["plain"], awake=1))[1:]  # no /sleep, /is_sleeping
    client, _ = await gateway([route(a, 1), route(plain, 1)])
    try:
        status, text = await ask(client, "plain")
        assert status == 503
        assert "engine_not_woken" in text and "--enable-sleep-mode" in text, text
        assert accelerator.changes == []  # a was not put to sleep for nothing
        status, _ = await ask(client, "a")
        assert status == 200
    finally:
        await client.close()


async def test_engines_swapped_behind_the_gateways_back_are_set_right_at_its_next_change(
        engines: list[FakeVllm]) -> None:
    """The gateway is the only one to swap a group's engines; where another did, the
    request it sent to an engine now asleep gets the engine's error, and the next change
    puts the group back within its bound."""
    accelerator = Accelerator(holds=1)
    a, b = await on(engines, accelerator, ["a", "b"], awake=1)
    client, _ = await gateway([route(a, 1), route(b, 1)])
    try:
        assert (await ask(client, "a"))[0] == 200  # the gateway knows: a awake, b asleep
        a.sleeping, b.sleeping = True, False  # swapped by someone else
        status, text = await ask(client, "a")
        assert status == 500 and "sleeping" in text, text  # the engine's own error
        for model in ("b", "a"):
            status, text = await ask(client, model)
            assert status == 200 and f"answered by {model}" in text, text
        assert accelerator.most <= 1
    finally:
        await client.close()


@pytest.mark.parametrize(("routes", "words"), [
    ([{"name": "a", "models": ["a"], "sleep": {"group": "g", "maxAwake": 1},
       "upstreams": [{"name": "x", "baseUrl": "http://x:1/v1", "auth": "none"},
                     {"name": "y", "baseUrl": "http://y:1/v1", "auth": "none"}]}],
     "exactly one upstream"),
    ([{"models": ["a"], "sleep": {"group": "g", "maxAwake": 1},
       "upstream": {"baseUrl": "http://x:1/v1", "auth": "none"}},
      {"models": ["b"], "sleep": {"group": "g", "maxAwake": 2},
       "upstream": {"baseUrl": "http://y:1/v1", "auth": "none"}}],
     "routes[1].sleep.maxAwake: 2 here but 1 in routes[0]"),
    ([{"models": ["a"], "sleep": {"group": "g", "minAwakeSeconds": 30},
       "upstream": {"baseUrl": "http://x:1/v1", "auth": "none"}},
      {"models": ["b"], "sleep": {"group": "g"},
       "upstream": {"baseUrl": "http://y:1/v1", "auth": "none"}}],
     "routes[1].sleep.minAwakeSeconds: 0.0 here but 30.0 in routes[0]"),
    ([{"models": ["a"], "sleep": {"group": "g", "maxWakesPerMinute": 0},
       "upstream": {"baseUrl": "http://x:1/v1", "auth": "none"}}],
     "maxWakesPerMinute"),
    ([{"models": ["a"], "sleep": {"group": "g", "maxAwake": 1, "pinned": True},
       "upstream": {"baseUrl": "http://x:1/v1", "auth": "none"}},
      {"models": ["b"], "sleep": {"group": "g", "maxAwake": 1},
       "upstream": {"baseUrl": "http://y:1/v1", "auth": "none"}}],
     "routes[0].sleep.pinned: 1 routes of sleep group 'g' are pinned and maxAwake is 1"),
    ([{"models": ["a"], "sleep": {"group": "g", "pinned": True},
       "upstream": {"baseUrl": "http://x:1/v1", "auth": "none"}},
      {"models": ["b"], "sleep": {"group": "g", "pinned": True},
       "upstream": {"baseUrl": "http://y:1/v1", "auth": "none"}}],
     "routes[1].sleep.pinned: 2 routes of sleep group 'g' are pinned and maxAwake is 1"),
])
def test_a_sleep_group_that_cannot_work_is_refused_with_the_field(
        routes: list[dict[str, Any]], words: str) -> None:
    with pytest.raises(ConfigError, match=r".*") as raised:
        parse_config({"routes": routes})
    assert words in str(raised.value), str(raised.value)


async def states(client: TestClient[Any, Any]) -> dict[str, dict[str, Any]]:
    """GET /models: each engine's status by model, as llama-server's router reports them."""
    resp = await client.get("/models")
    assert resp.status == 200
    return {m["id"]: m["status"] for m in (await resp.json())["data"]}


LOADED, UNLOADED = {"value": "loaded"}, {"value": "unloaded"}


async def test_get_models_says_which_engines_are_loaded_as_llama_servers_router_does(
        engines: list[FakeVllm]) -> None:
    fakes = await on(engines, Accelerator(holds=2), ["a", "b", "c"], awake=2)
    client, _ = await gateway([route(f, 2) for f in fakes])
    try:  # before any change, the engines are asked
        assert await states(client) == {"a": LOADED, "b": LOADED, "c": UNLOADED}
        status, _ = await ask(client, "c")
        assert status == 200
        assert await states(client) == {"a": UNLOADED, "b": LOADED, "c": LOADED}
    finally:
        await client.close()


async def test_get_models_says_which_engine_failed_its_wake(engines: list[FakeVllm]) -> None:
    # the accelerator holds one though the group was told two: b's wake runs out of memory
    a, b = await on(engines, Accelerator(holds=1), ["a", "b"], awake=1)
    client, _ = await gateway([route(a, 2), route(b, 2)])
    try:
        status, text = await ask(client, "b")
        assert status == 503 and "CUDA out of memory" in text, text
        found = await states(client)
        assert found["a"] == LOADED
        assert found["b"]["value"] == "unloaded" and found["b"]["failed"] is True
        assert "CUDA out of memory" in found["b"]["reason"]  # the member's Loaded condition
    finally:
        await client.close()


async def test_get_models_is_empty_where_no_engines_take_turns(
        engines: list[FakeVllm]) -> None:
    (a,) = await on(engines, None, ["a"], awake=1)
    client, _ = await gateway([{"name": "a", "models": ["a"],
                                "upstream": {"baseUrl": f"{a.url}/v1", "auth": "none"}}])
    try:
        assert await states(client) == {}
    finally:
        await client.close()


@dataclass
class Time:
    """A clock the gateway's waits move forward: each wait recorded, none really taken.

    With ``held`` set, a wait blocks until the test sets it (to sample what it holds).
    """

    now: float = 1000.0
    waits: list[float] = field(default_factory=list)
    held: asyncio.Event | None = None

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(round(seconds, 3))
        if self.held is not None:
            await self.held.wait()
        self.now += max(seconds, 0.0)
        await asyncio.sleep(0)


# (case, the group's policy, the models asked for in turn, the waits, the changes)
AGAINST_THRASH = [
    ("a woken engine stays awake its minimum", {"minAwakeSeconds": 30}, ["a", "b", "a", "b"],
     [30.0, 30.0, 30.0],
     [("sleep", "a"), ("wake", "b"), ("sleep", "b"), ("wake", "a"), ("sleep", "a"),
      ("wake", "b")]),
    ("requests for the awake engine never wait", {"minAwakeSeconds": 30}, ["a", "a", "a"],
     [], []),
    ("a pinned engine is never put to sleep for another", {"pinned": "a", "maxAwake": 2},
     ["a", "b", "c", "a", "b"],
     # a, used least recently when c comes, stays; b sleeps for c, c for b
     [], [("sleep", "b"), ("wake", "c"), ("sleep", "c"), ("wake", "b")]),
    ("past the wake budget a wake waits for the window", {"maxWakesPerMinute": 2},
     ["a", "b", "c", "a"], [60.0],
     [("sleep", "a"), ("wake", "b"), ("sleep", "b"), ("wake", "c"), ("sleep", "c"),
      ("wake", "a")]),
]


@pytest.mark.parametrize(("case", "policy", "asked", "waits", "changes"), AGAINST_THRASH,
                         ids=[t[0] for t in AGAINST_THRASH])
async def test_against_thrash_a_request_for_an_engine_asleep_waits_its_turn(
        engines: list[FakeVllm], case: str, policy: dict[str, Any], asked: list[str],
        waits: list[float], changes: list[tuple[str, str]]) -> None:
    policy = dict(policy)
    pinned, awake = policy.pop("pinned", None), policy.pop("maxAwake", 1)
    accelerator = Accelerator(holds=awake)
    fakes = await on(engines, accelerator, ["a", "b", "c"], awake=awake)
    time = Time()
    client, _ = await gateway([route(f, awake, **policy, **(
        {"pinned": True} if f.base_model == pinned else {})) for f in fakes],
        clock=time.clock, sleep=time.sleep)
    try:
        for model in asked:
            status, text = await ask(client, model)
            assert status == 200 and f"answered by {model}" in text, text
        assert time.waits == waits
        assert accelerator.changes == changes and accelerator.most <= awake
    finally:
        await client.close()


async def test_a_request_waiting_for_its_engines_turn_is_counted_while_it_waits(
        engines: list[FakeVllm]) -> None:
    fakes = await on(engines, Accelerator(holds=1), ["a", "b", "c"], awake=1)
    time = Time(held=asyncio.Event())
    client, gw = await gateway([route(f, 1, minAwakeSeconds=30) for f in fakes],
                               clock=time.clock, sleep=time.sleep)
    try:
        assert (await ask(client, "a"))[0] == 200
        waiting = asyncio.create_task(ask(client, "b"))
        async with asyncio.timeout(10):
            while not time.waits:  # b's request has met a's minimum
                await asyncio.sleep(0)
        later = [asyncio.create_task(ask(client, m)) for m in ("c", "c")]
        async with asyncio.timeout(10):
            while gw.route_line("c")[0] < 2:
                await asyncio.sleep(0)
        scraped = await (await client.get("/metrics")).text()
        assert (f'llmop_gateway_engine_wake_waiting{{group="gpu-0",upstream="{fakes[1].url}'
                f'/v1"}} 1.0') in scraped
        # each route's requests waiting, and its place in the group's line
        assert [gw.route_line(m) for m in ("a", "b", "c")] == [(0, 0), (1, 1), (2, 2)]
        # a's own calls: none in flight, its last ended on the gateway's clock (now)
        assert (gw.route_calls("a"), gw.route_calls("c")) == ((0, 0.0), (0, None))
        time.held.set()
        assert (await waiting)[0] == 200
        assert [(await t)[0] for t in later] == [200, 200]
        assert gw.route_line("c") == (0, 0)
        scraped = await (await client.get("/metrics")).text()
        assert (f'llmop_gateway_engine_wake_waiting{{group="gpu-0",upstream="{fakes[1].url}'
                f'/v1"}} 0.0') in scraped
    finally:
        await client.close()


class Recorded:
    """An EngineControl that does what it is asked at once and remembers it."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def sleep(self, url: str) -> None:
        self.calls.append(("sleep", url))

    async def wake(self, url: str) -> None:
        self.calls.append(("wake", url))

    async def sleeping(self, url: str) -> bool:
        return url == "c"


async def test_an_idle_engine_that_comes_of_age_sleeps_before_a_busy_one_drains() -> None:
    """A (idle, woken 5 s ago) and B (busy, long awake), ten seconds' minimum: the request
    for C waits for A's minimum, not for B's stream, and B takes requests again."""
    time, control = Time(now=1000.0), Recorded()
    group = SleepGroup("g", 2, control, min_awake=10, clock=time.clock, sleep=time.sleep)
    group.engines = {u: Engine(u, state="awake") for u in ("a", "b")} | {"c": Engine("c")}
    group.engines["a"].awake_since, group.engines["b"].awake_since = 995.0, 900.0
    group.engines["b"].in_use = 1  # a long stream
    async with asyncio.timeout(5):
        await group.enter("c")
    assert control.calls == [("sleep", "a"), ("wake", "c")]
    assert time.waits == [5.0]
    assert group.engines["b"].state == "awake" and group.enter_now("b")


async def test_a_members_place_in_line_is_its_earliest_request_still_waiting() -> None:
    """B's first request waits for A's minimum, C's and B's second behind it: B is first,
    then C. B's first leaves: C, whose request came before B's second, is first now."""
    time, control = Time(held=asyncio.Event()), Recorded()
    group = SleepGroup("g", 1, control, min_awake=30, clock=time.clock, sleep=time.sleep)
    group.engines = {"a": Engine("a", state="awake", awake_since=1000.0),
                     "b": Engine("b", state="asleep"), "c": Engine("c", state="asleep")}
    first = asyncio.create_task(group.enter("b"))
    async with asyncio.timeout(5):
        while not time.waits:  # B's first holds the group, waiting for A's minimum
            await asyncio.sleep(0)
    behind = [asyncio.create_task(group.enter(u)) for u in ("c", "b")]
    await asyncio.sleep(0)  # each takes its ticket, then waits for the group
    assert (group.line("b"), group.line("c"), group.line("a")) == ((2, 1), (1, 2), (0, 0))
    first.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await first
    assert (group.line("b"), group.line("c")) == ((1, 2), (1, 1))
    for task in behind:
        task.cancel()
    await asyncio.gather(*behind, return_exceptions=True)
    assert (group.line("b"), group.line("c")) == ((0, 0), (0, 0))


async def test_get_models_passes_on_what_llama_servers_router_says_of_each_member() -> None:
    """Behind a pool's own gateway, the operator reads the router's words: a member asleep
    after its idle time, one whose load failed (exit code, no reason: the pod's log has
    it), one loaded."""
    said = {"chat": {"value": "loaded"}, "qa": {"value": "sleeping"},
            "long": {"value": "unloaded", "failed": True, "exit_code": 1,
                     "preset": "[long]\nmodel = /models/long.gguf\n"}}

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": m, "status": s} for m, s in said.items()]})

    app = web.Application()
    app.router.add_get("/models", models)
    router = TestServer(app, host="127.0.0.1")
    await router.start_server()
    base = str(router.make_url("/v1"))
    client, _ = await gateway([
        {"name": m, "models": [m], "upstream": {"baseUrl": base, "auth": "none"},
         "sleep": {"group": "pool p", "maxAwake": 1, "control": "llama-router"}}
        for m in said])
    try:
        body = await (await client.get("/models")).json()
        assert {m["id"]: m["status"] for m in body["data"]} == {
            "chat": {"value": "loaded"}, "qa": {"value": "sleeping"},
            "long": {"value": "unloaded", "failed": True, "exit_code": 1}}
    finally:
        await client.close()
        await router.close()
