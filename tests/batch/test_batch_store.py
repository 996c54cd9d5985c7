"""The batch stores: files, batches and results survive a restart, per owner.

Every case runs on both: `llmop up`'s SQLite file and the router's Redis (a real
redis-server). "Reopened" is a new store on the same file or server, as after a restart.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from llm_operator.batch.input import BatchRequest
from llm_operator.batch.redis_store import RedisBatchStore
from llm_operator.batch.state import Batch
from llm_operator.batch.store import BatchStore, Store, new_batch_id

from redisserver import redis_server

Opener = Callable[[], Store]

REQUESTS = [BatchRequest(1, "a", "/v1/chat/completions", {"model": "gemma"}),
            BatchRequest(2, "b", "/v1/chat/completions", {"model": "gemma"})]


@pytest.fixture(params=["sqlite", "redis"])
async def opener(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Opener]:
    if request.param == "sqlite":
        yield lambda: BatchStore(tmp_path / "batches.db")
        return
    async with redis_server(tmp_path) as url:
        clients: list[redis.Redis] = []

        def open_redis() -> Store:
            clients.append(redis.Redis.from_url(url))
            return RedisBatchStore(clients[-1])
        yield open_redis
        for client in clients:
            client.close()


def test_a_file_belongs_to_its_owner_and_survives_a_restart(opener: Opener) -> None:
    store = opener()
    stored = store.add_file("team-a", "in.jsonl", "batch", b'{"custom_id": "a"}\n', 1000)
    reopened = opener()  # started again
    assert reopened.file(stored.id, "team-a") == stored
    assert reopened.content(stored.id, "team-a") == b'{"custom_id": "a"}\n'
    assert stored.as_openai() == {"id": stored.id, "object": "file", "bytes": 19,
                                  "created_at": 1000, "filename": "in.jsonl",
                                  "purpose": "batch", "status": "processed"}
    assert reopened.file(stored.id, "team-b") is None  # another key: it does not exist
    assert reopened.content(stored.id, "team-b") is None
    assert not reopened.delete_file(stored.id, "team-b")
    assert reopened.delete_file(stored.id, "team-a")
    assert reopened.file(stored.id, "team-a") is None


def test_a_batch_is_stored_as_it_stands_and_read_back_whole(opener: Opener) -> None:
    store = opener()
    batch = Batch(new_batch_id(), "team-a", "/v1/chat/completions", "file-1", 1000,
                  metadata={"job": "nightly"})
    store.save(batch)
    batch.validated(REQUESTS, [], now=1001)
    batch.answered(ok=True)
    store.save(batch)
    again = opener().batch(batch.id, "team-a")
    assert again is not None and again.as_openai() == batch.as_openai()
    assert store.batch(batch.id, "team-b") is None
    assert [b.id for b in store.unfinished()] == [batch.id]


def test_a_request_run_again_after_a_restart_appears_once(opener: Opener) -> None:
    store = opener()
    store.record("batch_1", 2, "output", {"custom_id": "b", "try": 1})
    store.record("batch_1", 1, "error", {"custom_id": "a"})
    store.record("batch_1", 2, "output", {"custom_id": "b", "try": 2})  # ran again
    assert store.done_lines("batch_1") == {1, 2}
    assert store.results("batch_1", "output") == [{"custom_id": "b", "try": 2}]
    assert store.results("batch_1", "error") == [{"custom_id": "a"}]
    assert store.counts("batch_1") == (1, 1)
    store.record("batch_1", 1, "output", {"custom_id": "a", "try": 2})  # now answered
    assert store.counts("batch_1") == (2, 0)
    assert store.results("batch_1", "error") == []


def test_an_owners_files_are_listed_newest_first_a_page_at_a_time(opener: Opener) -> None:
    store = opener()
    ids = [store.add_file("team-a", f"f{i}.jsonl", "batch", b"{}\n", 1000 + i).id
           for i in range(5)]
    output = store.add_file("team-a", "out.jsonl", "batch_output", b"{}\n", 1000).id
    store.add_file("team-b", "theirs.jsonl", "batch", b"{}\n", 3000)
    newest = ids[::-1]

    def page(**query: Any) -> tuple[list[str], bool]:
        found, more = store.files("team-a", **query)
        return [f.id for f in found], more

    assert page(purpose="batch") == (newest, False)
    assert page(limit=2, purpose="batch") == (newest[:2], True)
    assert page(after=newest[1], limit=2, purpose="batch") == (newest[2:4], True)
    assert page(after=newest[3], limit=2, purpose="batch") == (newest[4:], False)
    assert page(newest_first=False, after=ids[2], purpose="batch") == (ids[3:], False)
    assert page(purpose="batch_output") == ([output], False)
    assert len(page()[0]) == 6  # every purpose; never another owner's


def test_batches_are_listed_newest_first_a_page_at_a_time(opener: Opener) -> None:
    store = opener()
    for index in range(5):
        store.save(Batch(f"batch_{index}", "team-a", "/v1/embeddings", "file-1",
                         1000 + index))
    store.save(Batch("batch_other", "team-b", "/v1/embeddings", "file-2", 2000))
    first, more = store.batches("team-a", limit=2)
    assert ([b.id for b in first], more) == (["batch_4", "batch_3"], True)
    rest, more = store.batches("team-a", after="batch_3", limit=10)
    assert ([b.id for b in rest], more) == (["batch_2", "batch_1", "batch_0"], False)
