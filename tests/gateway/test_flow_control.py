"""Flow control through the gateway: requests beyond the slots wait by band and fair share.

A real gateway on loopback in front of an upstream that holds every request until the
test lets it answer, called with aiohttp and the OpenAI SDK.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from llm_operator.access.keyring import digest
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.flow.bands import FAIRNESS_HEADER, OBJECTIVE_HEADER
from llm_operator.gateway.flow.queue import Sizes
from llm_operator.gateway.routing.routes import pools
from llm_operator.gateway.settings.config import parse_config

from flowtools import GatedEngine, cancel_all, serving
from gwtools import metric


class Front:
    """The gateway under test, served on loopback, and requests sent to it."""

    def __init__(self, gateway: Gateway, url: str, http: aiohttp.ClientSession) -> None:
        self.gateway, self.url, self.http = gateway, url, http
        self.sent: list[asyncio.Task[tuple[int, dict[str, Any], dict[str, str]]]] = []

    def send(self, name: str, headers: dict[str, str] | None = None
             ) -> asyncio.Task[tuple[int, dict[str, Any], dict[str, str]]]:
        async def call() -> tuple[int, dict[str, Any], dict[str, str]]:
            async with self.http.post(f"{self.url}/v1/chat/completions", headers=headers,
                                      json={"model": "m", "user": name, "messages": [
                                          {"role": "user", "content": "hi"}]}) as resp:
                return resp.status, await resp.json(), dict(resp.headers)
        task = asyncio.create_task(call())
        self.sent.append(task)
        return task

    async def until_queued(self, count: int) -> None:
        async with asyncio.timeout(10):
            while self.gateway.flow.queued("m") != count:
                await asyncio.sleep(0)


@contextlib.asynccontextmanager
async def front(upstream_url: str, *, slots: int = 1, flow: dict[str, Any] | None = None,
                **config: Any) -> AsyncIterator[Front]:
    gw = Gateway(parse_config({
        "routes": [{"models": ["m"], "upstream": {"baseUrl": upstream_url, "auth": "none",
                                                  "slots": slots}}],
        **({"flowControl": flow} if flow is not None else {}), **config}))
    async with serving(gw) as url, aiohttp.ClientSession() as http:
        out = Front(gw, url, http)
        try:
            yield out
        finally:
            await cancel_all(out.sent)


def objective(band: str) -> dict[str, str]:
    return {OBJECTIVE_HEADER: band}


async def test_a_freed_slot_goes_to_the_highest_band_waiting(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with front(url) as gw:
        gw.send("first")
        await fake.until_arrived(1)
        for name in ("batch", "standard", "interactive"):
            gw.send(name, objective(name))
            await gw.until_queued(len(gw.sent) - 1)
        for count, name in enumerate(("first", "interactive", "standard"), start=2):
            fake.gate(name).set()
            await fake.until_arrived(count)
        fake.gate("batch").set()
        answers = await asyncio.gather(*gw.sent)
    assert fake.arrived == ["first", "interactive", "standard", "batch"]
    assert [status for status, _, _ in answers] == [200] * 4
    assert metric(gw.gateway, "llmop_gateway_queue_wait_seconds_count", route="m",
                  band="batch") == 1
    assert metric(gw.gateway, "llmop_gateway_flow_requests_total", route="m",
                  band="standard", outcome="admitted") == 2


async def test_a_routes_busy_slots_are_its_requests_at_the_engine_sampled_while_held(
        engine: tuple[GatedEngine, str]) -> None:
    """What the console charts as slots busy: requests at the engine, not those queued."""
    fake, url = engine
    async with front(url, slots=2) as gw:
        assert gw.gateway.route_slots("m") == (0.0, 2)
        for name in ("a", "b", "c"):
            gw.send(name)
        await fake.until_arrived(2)
        await gw.until_queued(1)
        assert gw.gateway.route_slots("m") == (2.0, 2)  # "c" waits in flow control
        assert gw.gateway.route_slots("nope") is None
        for name in ("a", "b", "c"):
            fake.gate(name).set()
        await asyncio.gather(*gw.sent)
        assert gw.gateway.route_slots("m") == (0.0, 2)


async def test_a_light_fairness_id_is_not_stuck_behind_a_heavy_one(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with front(url, slots=2) as gw:
        for index in range(6):  # two out, four queued
            gw.send(f"heavy{index}", {FAIRNESS_HEADER: "heavy"})
        await gw.until_queued(4)
        gw.send("light", {FAIRNESS_HEADER: "light"})
        await gw.until_queued(5)
        fake.gate(fake.arrived[0]).set()
        await fake.until_arrived(3)
    assert fake.arrived[2] == "light"


async def test_a_full_queue_is_a_429_the_openai_sdk_reads(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    flow = {"bands": [{"name": "standard", "priority": 0, "maxQueue": 1}]}
    async with front(url, flow=flow) as gw:
        gw.send("first")
        await fake.until_arrived(1)
        gw.send("queued")
        await gw.until_queued(1)
        sdk = openai.AsyncOpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0)
        async with sdk:
            with pytest.raises(openai.RateLimitError) as refused:
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
    error = refused.value
    assert error.code == "queue_full"
    assert "band 'standard'" in error.message and "maxQueue" in error.message
    assert int(error.response.headers["Retry-After"]) >= 1
    assert metric(gw.gateway, "llmop_gateway_flow_requests_total", route="m",
                  band="standard", outcome="queue_full") == 1


async def test_a_request_that_waits_too_long_gets_503_with_retry_after(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    flow = {"bands": [{"name": "standard", "priority": 0, "maxWaitSeconds": 0.1}]}
    async with front(url, flow=flow) as gw:
        gw.send("first")
        await fake.until_arrived(1)
        status, body, headers = await gw.send("late")
    assert status == 503
    assert body["error"]["code"] == "queue_timeout"
    assert body["error"]["type"] == "server_error"
    assert "maxWaitSeconds" in body["error"]["message"]
    assert int(headers["Retry-After"]) >= 1
    assert fake.arrived == ["first"]


async def test_a_sheddable_band_is_refused_at_once_when_the_slots_are_busy(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    flow = {"bands": [{"name": "standard", "priority": 0},
                      {"name": "best-effort", "priority": -1, "sheddable": True}]}
    async with front(url, flow=flow) as gw:
        gw.send("first")
        await fake.until_arrived(1)
        status, body, _ = await gw.send("extra", objective("best-effort"))
    assert (status, body["error"]["code"]) == (429, "request_shed")


async def test_a_client_that_leaves_while_queued_is_removed_at_once(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with front(url) as gw:
        gw.send("first")
        await fake.until_arrived(1)
        leaving = gw.send("leaving")
        await gw.until_queued(1)
        leaving.cancel()  # the client closes its connection
        await gw.until_queued(0)
        staying = gw.send("staying")
        await gw.until_queued(1)
        fake.gate("first").set()
        fake.gate("staying").set()
        status, _, _ = await staying
        assert metric(gw.gateway, "llmop_gateway_flow_requests_total", route="m",
                      band="standard", outcome="cancelled") == 1
    assert status == 200
    assert fake.arrived == ["first", "staying"]


@pytest.mark.parametrize(("value", "message"), [
    ("t" * 300, "x-gateway-inference-fairness-id is 300 bytes; at most 256"),
    ("tenant\t7", "contains control characters"),
], ids=["too-long", "control-character"])
async def test_an_unusable_fairness_id_is_a_400_saying_why(
        engine: tuple[GatedEngine, str], value: str, message: str) -> None:
    fake, url = engine
    async with front(url) as gw:
        status, body, _ = await gw.send("bad", {FAIRNESS_HEADER: value})
    assert status == 400
    assert body["error"]["code"] == "invalid_fairness_id"
    assert message in body["error"]["message"]
    assert fake.arrived == []


async def test_an_unknown_objective_is_served_in_the_default_band_and_counted(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    fake.gate("typo").set()
    async with front(url) as gw:
        status, _, _ = await gw.send("typo", objective("interactve"))
    assert status == 200
    assert metric(gw.gateway, "llmop_gateway_flow_band_ignored_total", route="m",
                  reason="unknown") == 1
    assert metric(gw.gateway, "llmop_gateway_flow_requests_total", route="m",
                  band="standard", outcome="admitted") == 1


async def test_a_key_decides_its_band_and_a_header_cannot_raise_it(
        engine: tuple[GatedEngine, str], tmp_path: Path) -> None:
    fake, url = engine
    keys = tmp_path / "keys.yaml"
    keys.write_text(yaml.safe_dump({"keys": [
        {"id": "etl", "sha256": digest("sk-etl"), "band": "batch"},
        {"id": "chat", "sha256": digest("sk-chat"), "band": "interactive"}]}))
    async with front(url, clientKeys={"file": str(keys)}) as gw:
        gw.send("first", {"Authorization": "Bearer sk-chat"})
        await fake.until_arrived(1)
        gw.send("etl-claims-interactive", {"Authorization": "Bearer sk-etl",
                                           **objective("interactive")})
        await gw.until_queued(1)
        gw.send("chat-lowered", {"Authorization": "Bearer sk-chat", **objective("standard")})
        await gw.until_queued(2)
        fake.gate("first").set()
        await fake.until_arrived(2)
        fake.gate("chat-lowered").set()
        await fake.until_arrived(3)
    assert fake.arrived == ["first", "chat-lowered", "etl-claims-interactive"]
    assert metric(gw.gateway, "llmop_gateway_flow_band_ignored_total", route="m",
                  reason="above_key") == 1


async def test_flow_control_off_sends_everything_to_the_engine(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with front(url, flow={"enabled": False}) as gw:
        for index in range(4):
            gw.send(f"r{index}")
        await fake.until_arrived(4)
        assert gw.gateway.flow.queued("m") == 0


FAST_LOOKS = {"saturation": {"lookSeconds": 0.01}}


async def test_an_engine_with_an_idle_slot_while_requests_wait_here_gets_one_more(
        engine: tuple[GatedEngine, str]) -> None:
    """The round trip idles a slot: the gateway lets one more wait in the engine, no more
    than saturation.maxEngineQueue allows (half of 2 slots: 1)."""
    fake, url = engine
    fake.reported = (0, 2)  # full, as it is
    async with front(url, slots=2, flow=FAST_LOOKS) as gw:
        for index in range(5):
            gw.send(f"r{index}")
        await gw.until_queued(3)
        await fake.until_looked(3)
        assert len(fake.arrived) == 2  # a full engine with nothing to spare: unchanged
        fake.reported = (0, 1)  # a slot idle while three wait here
        await fake.until_arrived(3)
        await fake.until_looked(3)
        assert len(fake.arrived) == 3 and gw.gateway.flow.queued("m") == 2
        assert metric(gw.gateway, "llmop_gateway_engine_queue_allowed", route="m") == 1
        for name in list(fake.arrived):
            fake.gate(name).set()
        await fake.until_arrived(5)  # slots + engine queue: both remaining go at once


async def test_an_engine_whose_metrics_cannot_be_read_keeps_its_slots_and_says_so_once(
        engine: tuple[GatedEngine, str], caplog: pytest.LogCaptureFixture) -> None:
    fake, url = engine  # its /metrics answers 404
    async with front(url, slots=1, flow=FAST_LOOKS) as gw:
        for index in range(3):
            gw.send(f"r{index}")
        await gw.until_queued(2)
        await fake.until_looked(3)
        assert fake.arrived == ["r0"]
        # each look is sent once the one before was counted
        assert metric(gw.gateway, "llmop_gateway_engine_metrics_unreadable_total",
                      route="m") >= 2
        for name in ("r0", "r1", "r2"):  # dispatch goes on as the slot frees
            fake.gate(name).set()
        answers = await asyncio.gather(*gw.sent)
    assert [status for status, _, _ in answers] == [200] * 3
    lost = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    assert lost == [f"{url}: the engine's /metrics did not answer; its engine queue stays "
                    "flowControl.engineQueue until it does"]


@pytest.mark.parametrize(("upstreams", "flow", "capacity", "bound"), [
    ([{"slots": 4}, {"slots": 2}], {}, 6, None),
    ([{"slots": 4}, {"slots": 2}], {"engineQueue": 1}, 8, None),
    ([{"slots": 4}, {}], {}, None, None),
    ([{"slots": 4}, {}], {"perReplicaConcurrency": 3}, 7, None),
    ([{}], {}, None, None),
    ([{"slots": 1, "maxConcurrent": 9}, {"slots": 1, "maxConcurrent": 3}], {}, 2, 12),
    ([{"slots": 4}], {"enabled": False}, None, None),
], ids=["slots-added-up", "engine-queue-per-replica", "one-unknown-means-none",
        "per-replica-default", "unknown", "bound-from-max-concurrent", "off"])
def test_a_models_slots_are_its_upstreams_added_up(
        upstreams: list[dict[str, Any]], flow: dict[str, Any], capacity: int | None,
        bound: int | None) -> None:
    gw = Gateway(parse_config({"flowControl": flow, "routes": [{
        "models": ["m"], "upstreams": [{"name": f"r{i}", "baseUrl": f"http://10.0.0.{i}/v1",
                                        **u} for i, u in enumerate(upstreams)]}]}))
    pool = gw.flow.pools["m"]
    assert (pool.capacity, pool.bound) == (capacity, bound)


@pytest.mark.parametrize(("headroom", "sizes"), [
    ({}, Sizes(6, None, 0)),
    ({"http://10.0.0.0/v1": 2}, Sizes(8, None, 2)),
    ({"http://10.0.0.0/v1": 2, "http://10.0.0.1/v1": 1}, Sizes(9, None, 3)),
    ({"http://10.0.0.0/v1": -3}, Sizes(3, None, 0)),  # its KV cache is full
    ({"http://10.0.0.0/v1": -9}, Sizes(3, None, 0)),  # still one slot
    ({"http://10.0.0.1/v1": 3}, Sizes(7, 9, 1)),  # r1 takes 3 at once (maxConcurrent)
], ids=["none", "one-replica", "both", "kv-full", "at-least-one",
        "never-beyond-max-concurrent"])
def test_a_models_size_follows_each_replicas_engine_queue(
        headroom: dict[str, int], sizes: Sizes) -> None:
    bounded = sizes.bound is not None
    config = parse_config({"routes": [{"models": ["m"], "upstreams": [
        {"name": f"r{i}", "baseUrl": f"http://10.0.0.{i}/v1", "slots": n,
         **({"maxConcurrent": n + 2 - i} if bounded else {})}
        for i, n in enumerate((4, 2))]}]})
    assert pools(config, lambda url: headroom.get(url, 0)) == {"m": sizes}


def test_a_models_adapter_routes_share_its_pool() -> None:
    upstream = {"baseUrl": "http://10.0.0.1/v1", "slots": 2}
    gw = Gateway(parse_config({"routes": [
        {"name": "ns/m", "models": ["m"], "upstream": upstream},
        {"name": "ns/m/sql", "models": ["sql"], "pool": "ns/m", "upstream": upstream}]}))
    assert list(gw.flow.pools) == ["ns/m"]
