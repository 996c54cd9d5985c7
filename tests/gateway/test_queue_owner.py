"""Two router replicas: a model's requests wait in one queue, on the replica owning it.

Two real gateways on loopback addresses of their own (127.0.0.2 and 127.0.0.3), each told
the other is ready, in front of one engine with one slot that answers when the test lets
it; clients connect from 127.0.0.1, as a pod that is not a replica would.
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

from llm_operator.batch.runner import OWNER_HEADER, RUN_HEADER
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.flow.bands import FAIRNESS_HEADER
from llm_operator.gateway.routing.owners import PEER_HEADER, Owners
from llm_operator.gateway.settings.config import parse_config

from fake_upstream import FakeUpstream, Reply, sse_chunks
from flowtools import GatedEngine, cancel_all, serving
from gwtools import metric
from otlp_receiver import receiver

HOSTS = {"a": "127.0.0.2", "b": "127.0.0.3"}


class Replicas:
    """Router replicas ``a`` (owning model ``m``'s queue) and ``b``."""

    def __init__(self, gateways: dict[str, Gateway], urls: dict[str, str],
                 http: aiohttp.ClientSession) -> None:
        self.gateways, self.urls, self.http = gateways, urls, http
        self.sent: list[asyncio.Task[tuple[int, dict[str, Any]]]] = []

    def send(self, to: str, name: str, headers: dict[str, str] | None = None
             ) -> asyncio.Task[tuple[int, dict[str, Any]]]:
        async def call() -> tuple[int, dict[str, Any]]:
            async with self.http.post(f"{self.urls[to]}/v1/chat/completions", headers=headers,
                                      json={"model": "m", "user": name, "messages": [
                                          {"role": "user", "content": "hi"}]}) as resp:
                return resp.status, await resp.json()
        task = asyncio.create_task(call())
        self.sent.append(task)
        return task

    async def until_queued(self, on: str, count: int) -> None:
        async with asyncio.timeout(10):
            while self.gateways[on].flow.queued("m") != count:
                await asyncio.sleep(0)

    def passed(self, on: str, outcome: str = "passed") -> float:
        return metric(self.gateways[on], "llmop_gateway_peer_requests_total", route="m",
                      outcome=outcome)


def owning(pool: str, names: list[str]) -> str:
    """Which of ``names`` owns ``pool``."""
    owners = Owners("")
    owners.update({n: f"http://{n}" for n in names})
    found = owners.owner(pool)
    assert found is not None
    return found.removeprefix("http://")


@contextlib.asynccontextmanager
async def replicas(upstream: str, *, owner_at: str | None = None,
                   flow: dict[str, Any] | None = None) -> AsyncIterator[Replicas]:
    # the replica names as the Service lists them; ours: ``a``, the one owning "m", and ``b``
    owner_name = owning("m", ["router-1", "router-2"])
    alias = {"a": owner_name, "b": "router-2" if owner_name == "router-1" else "router-1"}
    gateways: dict[str, Gateway] = {}
    urls: dict[str, str] = {}
    async with contextlib.AsyncExitStack() as stack:
        for ours in ("a", "b"):
            route = {"models": ["m"], "upstream": {"baseUrl": upstream, "auth": "none",
                                                   "slots": 1}}
            gateway = gateways[ours] = Gateway(parse_config({"routes": [route], **(
                {"flowControl": flow} if flow is not None else {})}), owners=Owners(alias[ours]))
            urls[ours] = await stack.enter_async_context(serving(gateway, HOSTS[ours]))
        ready = {alias[ours]: urls[ours] for ours in ("a", "b")}
        if owner_at is not None:  # the owner listed at another address
            ready[alias["a"]] = owner_at
        for gateway in gateways.values():
            assert gateway.owners is not None
            gateway.owners.update(ready)
        http = await stack.enter_async_context(aiohttp.ClientSession())
        out = Replicas(gateways, urls, http)
        try:
            yield out
        finally:
            await cancel_all(out.sent)


async def test_a_light_request_on_the_other_replica_waits_in_the_owners_queue(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with replicas(url) as routers:
        for index in range(3):  # one runs, two wait on a
            routers.send("a", f"heavy{index}", {FAIRNESS_HEADER: "heavy"})
        await routers.until_queued("a", 2)
        routers.send("b", "light", {FAIRNESS_HEADER: "light"})
        await routers.until_queued("a", 3)  # b passed it to a's queue
        assert routers.gateways["b"].flow.queued("m") == 0
        fake.gate("heavy0").set()
        await fake.until_arrived(2)
        assert fake.arrived[1] == "light"
        for name in ("light", "heavy1", "heavy2"):
            fake.gate(name).set()
        answers = await asyncio.gather(*routers.sent)
    assert [status for status, _ in answers] == [200] * 4
    assert answers[3][1]["choices"][0]["message"]["content"] == "light"
    assert routers.passed("b") == 1
    assert PEER_HEADER not in fake.headers["light"]  # the owner asks the engine as usual


async def test_a_stream_through_the_other_replica_reaches_the_openai_sdk(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.then(Reply(chunks=sse_chunks("m", ["Hello", " from", " a"])))
    async with replicas(url) as routers:
        sdk = openai.AsyncOpenAI(base_url=f"{routers.urls['b']}/v1", api_key="unused",
                                 max_retries=0)
        async with sdk:
            stream = await sdk.chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "hi"}])
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream
                            if chunk.choices])
        assert text == "Hello from a"
        assert routers.passed("b") == 1
        assert metric(routers.gateways["a"], "llmop_gateway_requests_total", route="m",
                      status="200") == 1  # counted once, by the owner
        assert metric(routers.gateways["b"], "llmop_gateway_requests_total", route="m",
                      status="200") == 0


async def test_the_owners_refusal_comes_back_as_it_said_it(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    flow = {"bands": [{"name": "standard", "priority": 0, "maxQueue": 1}]}
    async with replicas(url, flow=flow) as routers:
        routers.send("a", "first")
        await fake.until_arrived(1)
        routers.send("a", "queued")
        await routers.until_queued("a", 1)
        sdk = openai.AsyncOpenAI(base_url=f"{routers.urls['b']}/v1", api_key="unused",
                                 max_retries=0)
        async with sdk:
            with pytest.raises(openai.RateLimitError) as refused:
                await sdk.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
        for name in ("first", "queued"):
            fake.gate(name).set()
    assert refused.value.code == "queue_full"
    assert "maxQueue" in refused.value.message
    assert int(refused.value.response.headers["Retry-After"]) >= 1


async def test_an_owner_that_cannot_be_reached_leaves_its_requests_here_a_while(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    tried = 0

    async def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal tried  # a replica that goes away: it accepts, then closes at once
        tried += 1
        writer.close()

    gone = await asyncio.start_server(hang_up, HOSTS["a"], 0)
    port = gone.sockets[0].getsockname()[1]
    async with gone, replicas(url, owner_at=f"http://{HOSTS['a']}:{port}") as routers:
        for name in ("first", "second"):
            task = routers.send("b", name)
            await fake.until_arrived(len(fake.arrived) + 1)
            fake.gate(name).set()
            status, _ = await task
            assert status == 200
    assert tried == 1  # the second was served here without trying it again
    assert routers.passed("b", "unreachable") == 2


async def test_a_client_cannot_skip_the_owner_by_setting_the_peer_header(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with replicas(url) as routers:
        routers.send("a", "first")
        await fake.until_arrived(1)
        routers.send("b", "spoofed", {PEER_HEADER: "a"})  # from 127.0.0.1: not a replica
        await routers.until_queued("a", 1)
        for name in ("first", "spoofed"):
            fake.gate(name).set()
        await asyncio.gather(*routers.sent)
    assert routers.passed("b") == 1


async def test_a_request_another_replica_passed_on_is_served_where_it_lands(
        engine: tuple[GatedEngine, str]) -> None:
    fake, url = engine
    async with replicas(url) as routers:
        # sent from a's address to b, as a replica passing it on would
        connector = aiohttp.TCPConnector(local_addr=(HOSTS["a"], 0))
        async with aiohttp.ClientSession(connector=connector) as http:
            call = http.post(f"{routers.urls['b']}/v1/chat/completions",
                             headers={PEER_HEADER: "a"}, json={
                                 "model": "m", "user": "peer",
                                 "messages": [{"role": "user", "content": "hi"}]})
            task = asyncio.create_task(call.__aenter__())
            await fake.until_arrived(1)
            fake.gate("peer").set()
            response = await task
            assert response.status == 200
            response.release()
    assert routers.passed("b") == 0


@contextlib.asynccontextmanager
async def before_an_owner(owner_url: str, **config: Any
                          ) -> AsyncIterator[tuple[Gateway, str]]:
    """Replica ``b`` alone, told that a replica at ``owner_url`` owns model ``m``."""
    owner_name = owning("m", ["router-1", "router-2"])
    mine = "router-2" if owner_name == "router-1" else "router-1"
    gateway = Gateway(parse_config({"routes": [{"models": ["m"], "upstream": {
        "baseUrl": owner_url + "/v1", "auth": "none", "slots": 1}}], **config}),
        owners=Owners(mine))
    async with serving(gateway, HOSTS["b"]) as url:
        assert gateway.owners is not None
        gateway.owners.update({owner_name: owner_url, mine: url})
        yield gateway, url


async def test_an_owner_gone_mid_stream_ends_it_with_an_error_event_the_sdk_raises(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, fake_url = upstream  # stands in for the owning replica, which goes mid-answer
    fake.then(Reply(chunks=sse_chunks("m", ["Hello", " there"]), drop_after=1))
    async with before_an_owner(fake_url.removesuffix("/v1")) as (gateway, url):
        sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        words = []
        async with sdk:
            stream = await sdk.chat.completions.create(
                model="m", stream=True, messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.APIError) as cut:
                async for chunk in stream:
                    words.extend(c.delta.content or "" for c in chunk.choices)
    assert words == ["Hello"]
    assert "went away" in cut.value.message
    assert metric(gateway, "llmop_gateway_peer_requests_total", route="m",
                  outcome="cut") == 1


async def test_an_owner_gone_mid_answer_cuts_the_plain_answer_short(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, fake_url = upstream
    fake.then(Reply(body={"id": "x", "choices": [], "padding": "p" * 4000}, drop_after=1))
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    async with before_an_owner(fake_url.removesuffix("/v1")) as (gateway, url), \
            aiohttp.ClientSession() as http, \
            http.post(f"{url}/v1/chat/completions", json=chat) as answer:
        with pytest.raises(aiohttp.ClientPayloadError):  # never taken as whole
            await answer.read()
    assert metric(gateway, "llmop_gateway_peer_requests_total", route="m",
                  outcome="cut") == 1


async def test_the_owner_continues_the_trace_of_the_replica_it_came_through(
        upstream: tuple[FakeUpstream, str]) -> None:
    fake, fake_url = upstream  # stands in for the owning replica
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with receiver() as collector, before_an_owner(
            fake_url.removesuffix("/v1"), tracing={"endpoint": collector.url}) as (_, url), \
            aiohttp.ClientSession() as http, http.post(f"{url}/v1/chat/completions", json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]},
            headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"}) as answer:
        assert answer.status == 200
    sent = fake.requests[0]["headers"]["traceparent"]
    version, trace, span, flags = sent.split("-")
    assert (version, trace, flags) == ("00", caller_trace, "01")
    assert span != caller_span  # a span of this replica's, which the owner's continue


async def test_the_batch_runners_requests_are_served_on_its_own_replica(
        engine: tuple[GatedEngine, str], tmp_path: Path) -> None:
    """They act as a batch's owner by a secret only this process knows: not passed on."""
    fake, url = engine
    owner_name = owning("m", ["router-1", "router-2"])
    mine = "router-2" if owner_name == "router-1" else "router-1"
    gateway = Gateway(parse_config({"routes": [{"models": ["m"], "upstream": {
        "baseUrl": url, "auth": "none", "slots": 1}}], "batch": {
            "enabled": True, "path": str(tmp_path / "batches.db")}}), owners=Owners(mine))
    gateway.serve_batches(lambda: "http://unused", autostart=False)
    assert gateway.batch_runner is not None
    async with serving(gateway, HOSTS["b"]) as here, aiohttp.ClientSession() as http:
        assert gateway.owners is not None
        gateway.owners.update({owner_name: f"http://{HOSTS['a']}:9", mine: here})
        call = asyncio.create_task(http.post(
            f"{here}/v1/chat/completions", json={
                "model": "m", "user": "batch", "messages": [{"role": "user", "content": "hi"}]},
            headers={RUN_HEADER: gateway.batch_runner.token, OWNER_HEADER: ""}))
        await fake.until_arrived(1)
        fake.gate("batch").set()
        answer = await call
        assert answer.status == 200
        answer.release()
    for outcome in ("passed", "unreachable"):
        assert metric(gateway, "llmop_gateway_peer_requests_total", route="m",
                      outcome=outcome) == 0
