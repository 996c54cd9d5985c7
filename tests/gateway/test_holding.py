"""A model with no replica yet: requests wait for one (streams with keepalives), in order,
bounded, until their deadline; replicas are picked by load or by prompt prefix."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config

from fake_upstream import FakeUpstream, Reply, completion, sse_chunks
from gwtools import metric

CHAT = {"model": "gemma", "messages": [{"role": "user", "content": "Say hello"}]}


def held_route(reason: str = "Starting: 0 of 1 replicas ready", seconds: float = 30,
               upstreams: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": "ns/gemma", "models": ["gemma"], "upstreams": upstreams or [],
            "hold": {"seconds": seconds, "reason": reason, "keepaliveSeconds": 0.05},
            **extra}


class Replicas:
    """Fake engines on loopback, and a gateway whose routes the test rewrites."""

    def __init__(self) -> None:
        self.fakes: list[FakeUpstream] = []
        self.urls: list[str] = []
        self.servers: list[TestServer] = []

    async def add(self) -> str:
        fake = FakeUpstream()
        server = TestServer(fake.app, host="127.0.0.1")
        await server.start_server()
        self.fakes.append(fake)
        self.servers.append(server)
        self.urls.append(f"http://127.0.0.1:{server.port}/v1")
        return self.urls[-1]

    def upstreams(self, count: int | None = None) -> list[dict[str, Any]]:
        return [{"name": f"r{i}", "baseUrl": url, "auth": "none"}
                for i, url in enumerate(self.urls[:count])]


@pytest.fixture
async def replicas() -> AsyncIterator[Replicas]:
    out = Replicas()
    yield out
    for server in out.servers:
        await server.close()


async def serve(doc: dict[str, Any]) -> tuple[TestClient[Any, Any], Gateway]:
    gw = Gateway(parse_config(doc, empty_ok=True))
    client: TestClient[Any, Any] = TestClient(TestServer(gw.app(), host="127.0.0.1",
                                                         handler_cancellation=True))
    await client.start_server()
    return client, gw


async def until_held(gw: Gateway, label: str, count: int) -> None:
    async with asyncio.timeout(10):
        while gw.holds.held.get(label, 0) < count:
            await asyncio.sleep(0)  # the handlers run on this loop: yield to them


async def test_a_held_request_goes_out_when_a_replica_appears(replicas: Replicas) -> None:
    client, gw = await serve({"routes": [held_route()]})
    try:
        pending = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
        await until_held(gw, "ns/gemma", 1)
        assert metric(gw, "llmop_gateway_held_requests", route="ns/gemma") == 1
        await replicas.add()
        gw.reconfigure(parse_config({"routes": [held_route(upstreams=replicas.upstreams())]}))
        resp = await pending
        assert resp.status == 200
        assert (await resp.json())["choices"][0]["message"]["content"] == "Hello!"
        assert metric(gw, "llmop_gateway_held_requests", route="ns/gemma") == 0
        assert metric(gw, "llmop_gateway_requests_total", route="ns/gemma",
                      status="200") == 1
    finally:
        await client.close()


async def test_a_held_stream_gets_keepalives_then_the_answer(replicas: Replicas) -> None:
    client, gw = await serve({"routes": [held_route()]})
    try:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert resp.status == 200 and resp.headers["x-llmop-held"] == "true"
        first = await resp.content.readline()
        assert first == b": waiting for model (Starting: 0 of 1 replicas ready)\n"
        await replicas.add()
        replicas.fakes[0].then(Reply(chunks=sse_chunks("gemma", ["Hi", " there"])))
        gw.reconfigure(parse_config({"routes": [held_route(upstreams=replicas.upstreams())]}))
        rest = (await resp.read()).decode()
        events = [json.loads(line[6:]) for line in rest.splitlines()
                  if line.startswith("data: {")]
        text = "".join(e["choices"][0]["delta"].get("content", "") for e in events
                       if e.get("choices"))
        assert text == "Hi there" and rest.rstrip().endswith("data: [DONE]")
        assert metric(gw, "llmop_gateway_requests_total", route="ns/gemma",
                      status="200") == 1
    finally:
        await client.close()


async def test_at_the_deadline_a_plain_request_gets_503_with_the_reason() -> None:
    client, gw = await serve({"routes": [held_route(seconds=0.2)]})
    try:
        resp = await client.post("/v1/chat/completions", json=CHAT)
        body = await resp.json()
        assert resp.status == 503 and resp.headers["Retry-After"] == "5"
        assert body["error"]["code"] == "model_unavailable"
        assert body["error"]["message"] == ("'gemma' did not get a replica within 0.2 s: "
                                            "Starting: 0 of 1 replicas ready")
        assert metric(gw, "llmop_gateway_requests_total", route="ns/gemma",
                      status="503") == 1
    finally:
        await client.close()


async def test_at_the_deadline_a_held_stream_ends_with_an_error_event() -> None:
    client, gw = await serve({"routes": [held_route(seconds=0.2)]})
    try:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        text = (await resp.read()).decode()
        assert text.startswith(": waiting for model (Starting")
        error = json.loads(next(line[6:] for line in text.splitlines()
                                if line.startswith("data: {")))
        assert error["error"]["code"] == "model_unavailable"
        assert text.rstrip().endswith("data: [DONE]")
        assert metric(gw, "llmop_gateway_requests_total", route="ns/gemma",
                      status="503") == 1
    finally:
        await client.close()


async def test_a_model_deleted_while_held_answers_404() -> None:
    client, gw = await serve({"routes": [held_route()]})
    try:
        pending = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
        await until_held(gw, "ns/gemma", 1)
        gw.reconfigure(parse_config({"routes": []}, empty_ok=True))
        resp = await pending
        assert resp.status == 404
        assert (await resp.json())["error"]["code"] == "model_not_found"
    finally:
        await client.close()


async def test_holding_is_bounded_per_model() -> None:
    client, gw = await serve({"routes": [held_route()], "maxHeldPerRoute": 2})
    try:
        pending = [asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
                   for _ in range(2)]
        await until_held(gw, "ns/gemma", 2)
        resp = await client.post("/v1/chat/completions", json=CHAT)
        assert resp.status == 503
        assert "2 requests are already waiting for it" in \
            (await resp.json())["error"]["message"]
        gw.reconfigure(parse_config({"routes": []}, empty_ok=True))
        assert [r.status for r in await asyncio.gather(*pending)] == [404, 404]
    finally:
        await client.close()


async def test_500_requests_held_across_10_models_all_answered(replicas: Replicas) -> None:
    routes = [{**held_route(), "name": f"ns/m{i}", "models": [f"m{i}"]} for i in range(10)]
    client, gw = await serve({"routes": routes})
    url = str(client.make_url("/v1/chat/completions"))
    http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))  # 500 at once
    try:
        pending = [asyncio.create_task(http.post(url, json={**CHAT, "model": f"m{i % 10}"}))
                   for i in range(500)]
        for i in range(10):
            await until_held(gw, f"ns/m{i}", 50)
        url = await replicas.add()
        gw.reconfigure(parse_config({"routes": [
            {**r, "upstreams": [{"baseUrl": url, "auth": "none"}]} for r in routes]}))
        answers = await asyncio.gather(*pending)
        assert Counter(r.status for r in answers) == {200: 500}
        assert Counter(r["body"]["model"] for r in replicas.fakes[0].requests) == \
            {f"m{i}": 50 for i in range(10)}
        assert gw.holds.held == {}
    finally:
        await http.close()
        await client.close()


async def test_least_load_sends_the_next_request_to_the_idle_replica(
        replicas: Replicas) -> None:
    await replicas.add()
    await replicas.add()
    route = held_route(upstreams=replicas.upstreams(), balancing={"strategy": "least-load"})
    client, gw = await serve({"routes": [route]})
    try:
        answer = asyncio.Event()  # the first request holds its replica until the test looks
        for fake in replicas.fakes:
            fake.then(Reply(body=completion("gemma"), hold=answer))
        slow = asyncio.create_task(client.post("/v1/chat/completions", json=CHAT))
        async with asyncio.timeout(10):
            while not any(f.requests for f in replicas.fakes):
                await asyncio.sleep(0)
        busy = next(i for i, f in enumerate(replicas.fakes) if f.requests)
        busy_url = replicas.urls[busy]
        assert metric(gw, "llmop_gateway_in_flight_requests", upstream=busy_url) == 0
        await client.get("/metrics")  # set at scrape time
        assert metric(gw, "llmop_gateway_in_flight_requests", upstream=busy_url) == 1
        replicas.fakes[1 - busy].script.clear()  # the idle one answers at once
        for _ in range(3):
            resp = await client.post("/v1/chat/completions", json=CHAT)
            assert resp.headers["x-llmop-upstream"] == f"r{1 - busy}"
        answer.set()
        assert (await slow).status == 200
    finally:
        await client.close()


async def test_prefix_hash_keeps_a_conversation_on_one_replica(replicas: Replicas) -> None:
    for _ in range(4):
        await replicas.add()
    route = held_route(upstreams=replicas.upstreams(), balancing={"strategy": "prefix-hash"})
    client, _ = await serve({"routes": [route]})
    try:
        served: dict[str, set[str]] = {}
        for user in range(12):
            system = {"role": "system", "content": f"You help customer {user}. " * 20}
            for turn in range(3):
                body = {**CHAT, "messages": [system, {"role": "user",
                                                      "content": f"question {turn}"}]}
                resp = await client.post("/v1/chat/completions", json=body)
                served.setdefault(str(user), set()).add(resp.headers["x-llmop-upstream"])
        assert all(len(upstreams) == 1 for upstreams in served.values())
        assert len(set().union(*served.values())) > 1  # different prefixes spread
    finally:
        await client.close()


async def test_model_hash_keeps_each_models_requests_on_one_replica_until_it_is_busy(
        replicas: Replicas) -> None:
    """A model pool's replicas: each member loads where its requests go, so they stay."""
    for _ in range(4):
        await replicas.add()
    routes = [held_route(name=f"ns/member-{i}", models=[f"member-{i}"],
                         upstreams=replicas.upstreams(), balancing={"strategy": "model-hash"})
              for i in range(8)]
    client, _ = await serve({"routes": routes})
    try:
        served: dict[str, set[str]] = {}
        for turn in range(3):
            for i in range(8):
                body = {**CHAT, "model": f"member-{i}",
                        "messages": [{"role": "user", "content": f"question {turn} {i}"}]}
                resp = await client.post("/v1/chat/completions", json=body)
                served.setdefault(f"member-{i}", set()).add(resp.headers["x-llmop-upstream"])
        assert all(len(upstreams) == 1 for upstreams in served.values()), served
        assert len(set().union(*served.values())) > 1  # the members spread
    finally:
        await client.close()


async def test_a_route_sets_body_fields_on_every_request(replicas: Replicas) -> None:
    """What the router does for a llama.cpp adapter: the base model, the adapter's id."""
    await replicas.add()
    route = {"name": "ns/qwen/pirate", "models": ["pirate"],
             "upstreams": [{**replicas.upstreams()[0], "model": "qwen-base"}],
             "setFields": {"lora": [{"id": 0, "scale": 1.0}]}}
    client, _ = await serve({"routes": [route]})
    try:
        resp = await client.post("/v1/chat/completions",
                                 json={**CHAT, "model": "pirate", "lora": [{"id": 5}]})
        assert resp.status == 200
        sent = replicas.fakes[0].requests[-1]["body"]
        assert (sent["model"], sent["lora"]) == ("qwen-base", [{"id": 0, "scale": 1.0}])
        assert sent["messages"] == CHAT["messages"]
    finally:
        await client.close()


async def test_prefix_cache_follows_each_conversation_through_a_route_change(
        replicas: Replicas) -> None:
    """The router rewrites routes on every EndpointSlice event; what it indexed stays."""
    for _ in range(4):
        await replicas.add()
    route = held_route(upstreams=replicas.upstreams(), balancing={"strategy": "prefix-cache"})
    client, gw = await serve({"routes": [route]})
    system = {"role": "system", "content": "You are the help desk. " * 40}  # one for all
    try:
        history: dict[int, list[dict[str, str]]] = {u: [system] for u in range(8)}
        served: dict[int, set[str]] = {u: set() for u in history}

        async def ask(user: int, turn: int) -> None:
            messages = history[user]
            messages.append({"role": "user", "content": f"user {user} asks {turn}"})
            resp = await client.post("/v1/chat/completions",
                                     json={**CHAT, "messages": list(messages)})
            assert resp.status == 200
            served[user].add(resp.headers["x-llmop-upstream"])
            messages.append({"role": "assistant", "content": f"answer {turn} " * 30})

        # everyone starts at once: over the bound, the shared system prompt spreads
        await asyncio.gather(*(ask(user, 0) for user in history))
        for turn in (1, 2):
            if turn == 2:  # a replica came or went elsewhere: the same route, rebuilt
                gw.reconfigure(parse_config({"routes": [route]}, empty_ok=True))
            for user in history:  # one at a time: each follows its own history
                await ask(user, turn)
        assert all(len(upstreams) == 1 for upstreams in served.values())
        assert len(set().union(*served.values())) > 1
    finally:
        await client.close()


async def test_a_stream_over_the_routes_limit_is_refused_at_once_not_held(
        replicas: Replicas) -> None:
    """Two streams for a route with no replica, allowing 1 request a minute: the first is
    held until the replica comes and answered; the second is refused with a plain 429 at
    once. Limits come before holding (and before the guards): a request that will be
    refused waits for no replica and wakes none."""
    limit = {"rateLimit": {"requestsPerMinute": 1}}
    client, gw = await serve({"routes": [held_route(**limit)]})
    try:
        first = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        await until_held(gw, "ns/gemma", 1)
        second = await client.post("/v1/chat/completions", json={**CHAT, "stream": True})
        assert second.status == 429
        assert (await second.json())["error"]["code"] == "rate_limit_exceeded"
        await replicas.add()
        replicas.fakes[0].then(Reply(chunks=sse_chunks("gemma", ["Hi"])))
        gw.reconfigure(parse_config({"routes": [held_route(
            upstreams=replicas.upstreams(), **limit)]}))
        assert '"content":"Hi"' in (await first.read()).decode().replace(" ", "")
        assert metric(gw, "llmop_gateway_requests_total", route="ns/gemma",
                      status="429") == 1
    finally:
        await client.close()
