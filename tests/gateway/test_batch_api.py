"""OpenAI's Files and Batch APIs on the gateway, as the OpenAI SDK calls them.

A batch's requests run through the gateway itself (loopback) as the batch's owner, in the
lowest flow-control band, at the route's batch price; results are kept in a SQLite store
that a restarted gateway goes on from, each request appearing once in the output. The
upstream is tests/conftest.py's scripted fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import openai
import pytest
import redis
import yaml
from aiohttp.test_utils import TestServer

from llm_operator.access.keyring import digest
from llm_operator.batch.redis_store import RedisBatchStore
from llm_operator.batch.runner import RUN_HEADER
from llm_operator.batch.state import FINISHED, Batch
from llm_operator.batch.store import BatchStore, Store
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.server import batches
from llm_operator.gateway.settings.config import Batches, Route, SharedState, parse_config

from fake_upstream import FakeUpstream, Reply, completion
from freezing_proxy import FreezingProxy
from redisserver import RedisServer

ALICE, BOB = "sk-alice-0123456789", "sk-bob-0123456789"


def jsonl(*lines: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat(custom_id: str, model: str = "m", url: str = "/v1/chat/completions"
         ) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {
        "model": model, "messages": [{"role": "user", "content": custom_id}]}}


@dataclass
class Front:
    gateway: Gateway
    url: str

    def sdk(self, key: str = "unused") -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0)

    async def until(self, done: Callable[[], bool]) -> None:
        """Until ``done()`` holds, looking again at each of the runner's writes."""
        runner = self.gateway.batch_runner
        assert runner is not None
        async with asyncio.timeout(20):
            while True:
                runner.changed.clear()
                if done():
                    return
                await runner.changed.wait()

    async def until_finished(self, batch_id: str, owner: str = "") -> str:
        """The batch's final status, waiting on the runner's writes."""
        runner = self.gateway.batch_runner
        assert runner is not None
        async with asyncio.timeout(20):
            while True:
                runner.changed.clear()
                batch = runner.store.batch(batch_id, owner)
                assert batch is not None
                if batch.status in FINISHED:
                    return batch.status
                await runner.changed.wait()


@asynccontextmanager
async def front(store: Path | Store, upstream_url: str, **config: Any
                ) -> AsyncIterator[Front]:
    route = {"name": "ns/m", "models": ["m"], "upstreams": [
        {"name": "r0", "baseUrl": upstream_url, "auth": "none", "slots": 2}],
        **config.pop("route", {})}
    # a store object replaces the configured file (a disk that fills, Redis)
    path = store if isinstance(store, Path) else Path("replaced-by-the-store-given.db")
    gateway = Gateway(parse_config({"routes": [route], "batch": {
        "enabled": True, "path": str(path), "concurrency": 2, "retrySeconds": 0.05},
        **config}))
    address: list[str] = []
    gateway.serve_batches(lambda: address[0],
                          store=None if isinstance(store, Path) else store)
    # as llmop up and the router serve: a request whose client left is cancelled
    server = TestServer(gateway.app(), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    address.append(f"http://127.0.0.1:{server.port}")
    try:
        yield Front(gateway, address[0])
    finally:
        await server.close()


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [
        {"id": "alice", "sha256": digest(ALICE)}, {"id": "bob", "sha256": digest(BOB)}]}))
    return path


async def run_batch(sdk: openai.AsyncOpenAI, data: bytes) -> str:
    uploaded = await sdk.files.create(file=("input.jsonl", data), purpose="batch")
    batch = await sdk.batches.create(input_file_id=uploaded.id,
                                     endpoint="/v1/chat/completions",
                                     completion_window="24h", metadata={"job": "eval"})
    assert batch.status == "validating"
    return batch.id


async def test_a_batch_runs_through_the_gateway_and_its_output_keeps_each_custom_id(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    async with front(tmp_path / "b.db", url) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(chat("a"), chat("b"), chat("c")))
        assert await gw.until_finished(batch_id) == "completed"
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.output_file_id is not None
        output = (await sdk.files.content(batch.output_file_id)).text
        answered = gw.gateway.metrics.registry.get_sample_value(
            "llmop_gateway_batch_requests_total", {"outcome": "completed"})
    assert answered == 3
    assert (batch.request_counts.total, batch.request_counts.completed,
            batch.request_counts.failed) == (3, 3, 0)
    assert batch.metadata == {"job": "eval"} and batch.error_file_id is None
    assert batch.completed_at is not None and batch.in_progress_at is not None
    lines = [json.loads(line) for line in output.splitlines()]
    assert [line["custom_id"] for line in lines] == ["a", "b", "c"]
    assert {line["response"]["status_code"] for line in lines} == {200}
    assert lines[0]["response"]["body"]["choices"][0]["message"]["content"] == "Hello!"
    assert sorted(r["body"]["messages"][0]["content"] for r in fake.requests) == \
        ["a", "b", "c"]
    assert all(RUN_HEADER not in r["headers"] for r in fake.requests)  # never leaves


async def test_a_file_with_bad_lines_fails_the_batch_with_one_error_per_line(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    data = jsonl(chat("a"), chat("a"), chat("b", url="/v1/embeddings"),
                 chat("c", model="nope"))
    async with front(tmp_path / "b.db", url) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, data)
        assert await gw.until_finished(batch_id) == "failed"
        batch = await sdk.batches.retrieve(batch_id)
    assert batch.errors is not None and batch.errors.data is not None
    assert [(e.code, e.line) for e in batch.errors.data] == [
        ("duplicate_custom_id", 2), ("invalid_url", 3), ("model_not_found", 4)]
    assert fake.requests == []  # nothing of a failed batch runs


async def test_an_answer_that_is_an_error_goes_to_the_error_file(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.then(Reply(status=400, body={"error": {"message": "too long"}}))
    async with front(tmp_path / "b.db", url) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(chat("only")))
        assert await gw.until_finished(batch_id) == "completed"
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.error_file_id is not None and batch.output_file_id is None
        errors = (await sdk.files.content(batch.error_file_id)).text
    (line,) = [json.loads(text) for text in errors.splitlines()]
    assert (line["custom_id"], line["response"]["status_code"]) == ("only", 400)
    assert (batch.request_counts.completed, batch.request_counts.failed) == (0, 1)


@pytest.mark.parametrize(("data", "purpose", "says"), [
    (b'{"custom_id": "a"}\nnot json\n', "batch", "line 2"),
    (b"\xff\xfe", "batch", "UTF-8"),
    (jsonl(chat("a")), "fine-tune", "purpose 'fine-tune'"),
], ids=["not-jsonl", "not-utf8", "other-purpose"])
async def test_an_upload_that_cannot_be_a_batch_file_is_a_400_and_stores_nothing(
        tmp_path: Path, upstream: tuple[FakeUpstream, str], data: bytes, purpose: str,
        says: str) -> None:
    async with front(tmp_path / "b.db", upstream[1]) as gw, gw.sdk() as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.files.create(file=("in.jsonl", data), purpose=purpose)  # type: ignore[arg-type]
        listed = await sdk.files.list()
    assert says in refused.value.message
    assert listed.data == []


async def test_a_file_over_the_size_limit_is_a_400_naming_it_and_stores_nothing(
        tmp_path: Path, upstream: tuple[FakeUpstream, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(batches, "MAX_BYTES", 1000)  # OpenAI's 200 MB, made small
    async with front(tmp_path / "b.db", upstream[1]) as gw, gw.sdk() as sdk:
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.files.create(file=("in.jsonl", jsonl(*(chat(f"r{i}") for i in
                                                             range(20)))), purpose="batch")
        assert (await sdk.files.list()).data == []
    assert refused.value.code == "file_too_large"
    assert "over 1,000 bytes" in refused.value.message


async def test_files_are_listed_a_page_at_a_time_as_the_sdk_pages_them(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    async with front(tmp_path / "b.db", upstream[1]) as gw, gw.sdk() as sdk:
        uploaded = [(await sdk.files.create(file=(f"f{i}.jsonl", jsonl(chat(f"r{i}"))),
                                            purpose="batch")).id for i in range(5)]
        first = await sdk.files.list(limit=2)
        every = [f.id async for f in sdk.files.list(limit=2)]  # the SDK follows has_more
        oldest = [f.id async for f in sdk.files.list(limit=3, order="asc", purpose="batch")]
        none = await sdk.files.list(purpose="batch_output")
        with pytest.raises(openai.BadRequestError) as refused:
            await sdk.files.list(limit=0)
    assert len(first.data) == 2 and first.has_more
    assert sorted(every) == sorted(uploaded) and len(every) == 5
    assert sorted(oldest) == sorted(uploaded) and oldest == every[::-1]
    assert none.data == []
    assert refused.value.param == "limit"
    assert "limit must be a whole number from 1 to 10000" in refused.value.message


async def test_another_keys_files_and_batches_do_not_exist_for_it(
        tmp_path: Path, upstream: tuple[FakeUpstream, str], keys: Path) -> None:
    async with front(tmp_path / "b.db", upstream[1],
                     clientKeys={"file": str(keys)}) as gw, \
            gw.sdk(ALICE) as alice, gw.sdk(BOB) as bob:
        uploaded = await alice.files.create(file=("in.jsonl", jsonl(chat("a"))),
                                            purpose="batch")
        batch_id = await run_batch(alice, jsonl(chat("b")))
        assert await gw.until_finished(batch_id, "alice") == "completed"
        for call in (lambda: bob.files.retrieve(uploaded.id),
                     lambda: bob.files.content(uploaded.id),
                     lambda: bob.batches.retrieve(batch_id),
                     lambda: bob.batches.cancel(batch_id),
                     lambda: bob.batches.create(input_file_id=uploaded.id,
                                                endpoint="/v1/chat/completions",
                                                completion_window="24h")):
            with pytest.raises(openai.NotFoundError):
                await call()
        assert (await bob.batches.list()).data == []
        await alice.files.delete(uploaded.id)
        with pytest.raises(openai.NotFoundError):  # a deleted file
            await alice.batches.create(input_file_id=uploaded.id,
                                       endpoint="/v1/chat/completions",
                                       completion_window="24h")
        assert [b.id for b in (await alice.batches.list()).data] == [batch_id]


async def test_cancelling_a_finished_batch_is_a_409_and_changes_nothing(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    async with front(tmp_path / "b.db", upstream[1]) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(chat("a")))
        await gw.until_finished(batch_id)
        with pytest.raises(openai.ConflictError) as refused:
            await sdk.batches.cancel(batch_id)
        assert (await sdk.batches.retrieve(batch_id)).status == "completed"
    assert refused.value.code == "batch_not_cancellable"


async def test_a_cancelled_batch_sends_no_more_and_lists_what_it_did_not_send(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.then(Reply(body=completion("m"), delay=0.5), Reply(body=completion("m"), delay=0.5))
    async with front(tmp_path / "b.db", url) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(*(chat(f"r{i}") for i in range(6))))
        await asyncio.wait_for(fake.received.wait(), 10)
        cancelling = await sdk.batches.cancel(batch_id)
        assert cancelling.status == "cancelling"
        assert await gw.until_finished(batch_id) == "cancelled"
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.error_file_id is not None
        errors = [json.loads(t) for t in (await sdk.files.content(batch.error_file_id)
                                          ).text.splitlines()]
    assert len(fake.requests) == 2  # the two in flight (concurrency 2) finished
    assert {e["error"]["code"] for e in errors} == {"batch_cancelled"}
    assert len(errors) == 4 and batch.request_counts.completed == 2


async def stopped_mid_batch(store: Path, fake: FakeUpstream, url: str) -> str:
    """A batch of a, b and c, stopped once "a" is answered and "b" is being answered."""
    fake.then(Reply(body=completion("m")), Reply(body=completion("m"), delay=30))
    async with front(store, url) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(chat("a"), chat("b"), chat("c")))
        runner = gw.gateway.batch_runner
        assert runner is not None
        async with asyncio.timeout(10):
            while True:
                runner.changed.clear()
                fake.received.clear()
                if runner.store.done_lines(batch_id) and len(fake.requests) >= 2:
                    return batch_id
                waits = [asyncio.ensure_future(runner.changed.wait()),
                         asyncio.ensure_future(fake.received.wait())]
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiting in waits:
                    waiting.cancel()


async def test_a_restarted_gateway_goes_on_and_each_request_appears_once(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    store = tmp_path / "b.db"
    batch_id = await stopped_mid_batch(store, fake, url)
    sent_before = len(fake.requests)
    async with front(store, url) as gw, gw.sdk() as sdk:  # the same store: a restart
        assert await gw.until_finished(batch_id) == "completed"
        batch = await sdk.batches.retrieve(batch_id)
        assert batch.output_file_id is not None
        output = (await sdk.files.content(batch.output_file_id)).text
    assert [json.loads(t)["custom_id"] for t in output.splitlines()] == ["a", "b", "c"]
    assert batch.request_counts.completed == 3
    resent = [r["body"]["messages"][0]["content"] for r in fake.requests[sent_before:]]
    assert "a" not in resent  # a recorded result is not asked for again


async def test_a_batch_resumed_before_its_model_is_routed_loses_no_line(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    """CI: llmop up's runner resumed a batch before the first scan routed its model, read
    the file again against the routes, and closed the batch without the lines of a model
    it did not know yet: "b", in flight at the stop, was in neither file."""
    fake, url = upstream
    store = tmp_path / "b.db"
    batch_id = await stopped_mid_batch(store, fake, url)
    async with front(store, url, route={"models": ["other"]}) as gw, gw.sdk() as sdk:
        assert await gw.until_finished(batch_id) == "completed"
        batch = await sdk.batches.retrieve(batch_id)
        files = [f for f in (batch.output_file_id, batch.error_file_id) if f is not None]
        lines = [json.loads(t) for f in files
                 for t in (await sdk.files.content(f)).text.splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["a", "b", "c"]
    unrouted = [line for line in lines if line["custom_id"] == "b"]
    assert unrouted[0]["response"]["status_code"] == 404  # the model is not routed here


async def test_a_batch_runs_in_the_lowest_band_as_its_owner_at_the_batch_price(
        tmp_path: Path, upstream: tuple[FakeUpstream, str], keys: Path) -> None:
    url = upstream[1]
    pricing = {"inputPerMillion": 1_000_000, "outputPerMillion": 1_000_000}
    async with front(tmp_path / "b.db", url, clientKeys={"file": str(keys)},
                     route={"pricing": pricing}) as gw, gw.sdk(ALICE) as alice:
        await alice.chat.completions.create(model="m", messages=[
            {"role": "user", "content": "interactive"}])
        batch_id = await run_batch(alice, jsonl(chat("a")))
        assert await gw.until_finished(batch_id, "alice") == "completed"
        registry = gw.gateway.metrics.registry
        cost = registry.get_sample_value("llmop_gateway_key_cost_usd_total",
                                         {"key": "alice"})
        banded = registry.get_sample_value("llmop_gateway_flow_requests_total", {
            "route": "ns/m", "band": "batch", "outcome": "admitted"})
    assert cost == pytest.approx(14 + 7)  # 11 + 3 tokens, then half of them
    assert banded == 1


class SmallDisk(BatchStore):
    """A SQLite store whose file may not grow past ``pages`` pages once they are set:
    SQLite's own "database or disk is full", as on a full disk."""

    pages: int | None = None

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            if self.pages is not None:
                db.execute(f"PRAGMA max_page_count = {self.pages}")
            yield db

    def page_count(self) -> int:
        with self._db() as db:
            return int(db.execute("PRAGMA page_count").fetchone()[0])


async def test_a_store_that_fills_fails_the_batch_saying_so_and_keeps_its_results(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    store = SmallDisk(tmp_path / "b.db")
    async with front(store, upstream[1]) as gw, gw.sdk() as sdk:
        uploaded = await sdk.files.create(
            file=("in.jsonl", jsonl(*(chat(f"r{i:02}") for i in range(60)))), purpose="batch")
        store.pages = store.page_count() + 1  # room for a few results, then full
        batch = await sdk.batches.create(input_file_id=uploaded.id,
                                         endpoint="/v1/chat/completions",
                                         completion_window="24h")
        runner = gw.gateway.batch_runner
        assert runner is not None
        async with asyncio.timeout(20):
            while (found := runner.running(batch.id) or store.batch(batch.id, "")) is None \
                    or found.status != "failed":
                runner.changed.clear()
                await runner.changed.wait()
        failed = await sdk.batches.retrieve(batch.id)
        with pytest.raises(openai.InternalServerError) as refused:  # no room for a file
            await sdk.files.create(file=("more.jsonl", jsonl(*(chat(f"x{i}") for i in
                                                              range(200)))), purpose="batch")
    assert refused.value.status_code == 503
    assert refused.value.code == "batch_store_unavailable"
    assert failed.status == "failed" and failed.errors is not None
    (error,) = failed.errors.data or []
    assert error.code == "store_write_failed"
    assert "database or disk is full" in (error.message or "")
    kept = store.done_lines(batch.id)
    assert 0 < len(kept) < 60  # what was recorded before the disk filled is kept


class FullAfterOneResult(BatchStore):
    """A store whose second result write finds the disk full while the first worker's
    progress write (its state read when the write began) is still under way in its thread."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.records = 0
        self.progress_writing = threading.Event()
        self.failure_stored = threading.Event()
        self.progress_written = threading.Event()

    def record(self, batch_id: str, line: int, kind: Any, body: dict[str, Any]) -> None:
        self.records += 1
        if self.records == 2:
            assert self.progress_writing.wait(10), "the first worker's write never began"
            raise sqlite3.OperationalError("database or disk is full")
        super().record(batch_id, line, kind, body)

    def save(self, batch: Batch) -> None:
        if batch.status == "failed":
            super().save(batch)
            self.failure_stored.set()
        elif self.records >= 1 and not self.progress_writing.is_set():
            as_it_was = Batch(**asdict(batch))
            self.progress_writing.set()
            # a slow disk: the failure, if stored meanwhile, would be overwritten. The
            # runner must not store it meanwhile, so this waits out its bound then writes.
            self.failure_stored.wait(1)
            super().save(as_it_was)
            self.progress_written.set()
        else:
            super().save(batch)


async def test_a_failure_is_stored_after_the_writes_under_way_never_under_them(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    """A failed store write stops the other worker while its own write is in a thread:
    the batch's failure is stored once that write has landed (a flake of the test above,
    where the stored batch read "in_progress" after the runner said it failed)."""
    store = FullAfterOneResult(tmp_path / "b.db")
    async with front(store, upstream[1]) as gw, gw.sdk() as sdk:
        batch_id = await run_batch(sdk, jsonl(*(chat(f"r{i}") for i in range(4))))
        assert await gw.until_finished(batch_id) == "failed"
        assert await asyncio.to_thread(store.progress_written.wait, 10)
        stored = store.batch(batch_id, "")
    assert stored is not None and stored.status == "failed", stored
    assert stored.errors[0]["code"] == "store_write_failed"


async def test_a_store_that_restarts_mid_batch_holds_the_batch_up_and_loses_nothing(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    fake, url = upstream
    fake.then(*(Reply(body=completion("m"), delay=0.05) for _ in range(40)))
    server = RedisServer(tmp_path, appendonly=True)  # config/redis's persistence
    await server.start()
    client = redis.Redis.from_url(server.url, socket_connect_timeout=2, socket_timeout=5)
    store = RedisBatchStore(client)
    try:
        async with front(store, url) as gw, gw.sdk() as sdk:
            batch_id = await run_batch(sdk, jsonl(*(chat(f"r{i:02}") for i in range(12))))
            runner = gw.gateway.batch_runner
            assert runner is not None
            await gw.until(lambda: len(store.done_lines(batch_id)) >= 2)
            server.stop()  # as Kubernetes replaces Redis's pod
            await gw.until(lambda: runner.outage is not None)
            running = await sdk.batches.retrieve(batch_id)  # the runner's own copy
            with pytest.raises(openai.InternalServerError) as refused:
                await sdk.files.list()
            await server.start()
            assert await gw.until_finished(batch_id) == "completed"
            batch = await sdk.batches.retrieve(batch_id)
            assert batch.output_file_id is not None
            output = (await sdk.files.content(batch.output_file_id)).text
    finally:
        client.close()
        server.stop()
    assert running.status == "in_progress"
    assert refused.value.code == "batch_store_unavailable"  # what needs the store says so
    assert runner.outage is None
    assert [json.loads(t)["custom_id"] for t in output.splitlines()] == \
        [f"r{i:02}" for i in range(12)]  # each once, none lost
    assert batch.request_counts is not None and batch.request_counts.completed == 12


async def test_a_store_that_answers_nothing_is_refused_within_seconds_then_used_again(
        tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> None:
    """Redis's pod replaced without closing its connections: what is sent to the old pod's
    address is never answered. The Batch API's store (as the router opens it) gives up
    within its timeout and says when to retry; once Redis answers, the next call is served
    (the real-node suite's batch test saw Files and Batch calls held 30-40 s)."""
    server = RedisServer(tmp_path)
    await server.start()
    async with FreezingProxy.to_url(server.url) as proxy:
        shared = SharedState(url=f"redis://127.0.0.1:{proxy.port}/0")
        store = batches.open_store(Batches(enabled=True), shared)
        assert isinstance(store, RedisBatchStore)
        try:
            async with front(store, upstream[1]) as gw, gw.sdk() as sdk:
                uploaded = await sdk.files.create(file=("in.jsonl", jsonl(chat("a"))),
                                                  purpose="batch")
                proxy.thawed.clear()  # frozen: bytes go in, nothing comes back
                async with asyncio.timeout(batches.STORE_TIMEOUT_SECONDS + 5):
                    with pytest.raises(openai.InternalServerError) as refused:
                        await sdk.files.retrieve(uploaded.id)
                proxy.thawed.set()
                again = await sdk.files.retrieve(uploaded.id)
        finally:
            store.client.close()
            server.stop()
    assert refused.value.code == "batch_store_unavailable"
    assert int(refused.value.response.headers["Retry-After"]) <= 5  # back in seconds
    assert again.id == uploaded.id


@pytest.mark.parametrize("wake", [False, True], ids=["waits-for-a-replica", "wakes-it"])
async def test_a_model_with_no_replica_is_woken_for_batch_work_only_when_allowed(
        tmp_path: Path, upstream: tuple[FakeUpstream, str], wake: bool) -> None:
    held = {"name": "ns/m", "models": ["m"], "upstreams": [],
            "hold": {"seconds": 60, "reason": "scaled to zero"}}
    gateway = Gateway(parse_config({"routes": [held], "batch": {
        "enabled": True, "path": str(tmp_path / "b.db"), "retrySeconds": 0.05,
        "wakeModels": wake}}, empty_ok=True))
    address: list[str] = []
    asked = asyncio.Event()
    has_replica = gateway._has_replica

    def spied(model: str) -> bool:  # the runner asks before each send
        asked.set()
        return has_replica(model)
    gateway._has_replica = spied  # type: ignore[method-assign]
    gateway.serve_batches(lambda: address[0])
    server = TestServer(gateway.app(), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    address.append(f"http://127.0.0.1:{server.port}")
    try:
        async with openai.AsyncOpenAI(base_url=f"{address[0]}/v1", api_key="unused",
                                      max_retries=0) as sdk:
            batch_id = await run_batch(sdk, jsonl(chat("a")))
            if wake:  # sent at once, held by the gateway until the model has a replica
                async with asyncio.timeout(10):
                    while gateway.holds.held.get("ns/m", 0) < 1:
                        await asyncio.sleep(0)  # the handler runs on this loop
            else:  # asked, and not sent: nothing is held
                await asyncio.wait_for(asked.wait(), 10)
                asked.clear()
                await asyncio.wait_for(asked.wait(), 10)  # asked again: still waiting
                assert gateway.holds.held.get("ns/m", 0) == 0
            gateway.set_routes([Route.model_validate({
                **held, "upstreams": [{"name": "r0", "baseUrl": upstream[1],
                                       "auth": "none"}]})])
            front_ = Front(gateway, address[0])
            assert await front_.until_finished(batch_id) == "completed"
    finally:
        await server.close()
    assert len(upstream[0].requests) == 1
