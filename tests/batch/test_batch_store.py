"""`llmop up`'s batch store: files, batches and results survive a restart, per owner."""

from __future__ import annotations

from pathlib import Path

from llm_operator.batch.input import BatchRequest
from llm_operator.batch.state import Batch
from llm_operator.batch.store import BatchStore

REQUESTS = [BatchRequest(1, "a", "/v1/chat/completions", {"model": "gemma"}),
            BatchRequest(2, "b", "/v1/chat/completions", {"model": "gemma"})]


def test_a_file_belongs_to_its_owner_and_survives_a_restart(tmp_path: Path) -> None:
    store = BatchStore(tmp_path / "batches.db")
    stored = store.add_file("team-a", "in.jsonl", "batch", b'{"custom_id": "a"}\n', 1000)
    reopened = BatchStore(tmp_path / "batches.db")  # `llmop up` started again
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


def test_a_batch_is_stored_as_it_stands_and_read_back_whole(tmp_path: Path) -> None:
    store = BatchStore(tmp_path / "batches.db")
    batch = Batch(store.new_batch_id(), "team-a", "/v1/chat/completions", "file-1", 1000,
                  metadata={"job": "nightly"})
    store.save(batch)
    batch.validated(REQUESTS, [], now=1001)
    batch.answered(ok=True)
    store.save(batch)
    again = BatchStore(tmp_path / "batches.db").batch(batch.id, "team-a")
    assert again is not None and again.as_openai() == batch.as_openai()
    assert store.batch(batch.id, "team-b") is None
    assert [b.id for b in store.unfinished()] == [batch.id]


def test_a_request_run_again_after_a_restart_appears_once(tmp_path: Path) -> None:
    store = BatchStore(tmp_path / "batches.db")
    store.record("batch_1", 2, "output", {"custom_id": "b", "try": 1})
    store.record("batch_1", 1, "error", {"custom_id": "a"})
    store.record("batch_1", 2, "output", {"custom_id": "b", "try": 2})  # ran again
    assert store.done_lines("batch_1") == {1, 2}
    assert store.results("batch_1", "output") == [{"custom_id": "b", "try": 2}]
    assert store.results("batch_1", "error") == [{"custom_id": "a"}]


def test_batches_are_listed_newest_first_a_page_at_a_time(tmp_path: Path) -> None:
    store = BatchStore(tmp_path / "batches.db")
    for index in range(5):
        store.save(Batch(f"batch_{index}", "team-a", "/v1/embeddings", "file-1",
                         1000 + index))
    store.save(Batch("batch_other", "team-b", "/v1/embeddings", "file-2", 2000))
    first, more = store.batches("team-a", limit=2)
    assert ([b.id for b in first], more) == (["batch_4", "batch_3"], True)
    rest, more = store.batches("team-a", after="batch_3", limit=10)
    assert ([b.id for b in rest], more) == (["batch_2", "batch_1", "batch_0"], False)
