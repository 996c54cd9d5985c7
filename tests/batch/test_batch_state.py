"""A batch's statuses as OpenAI's Batch API shows them, and its result lines."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from llm_operator.batch.input import BatchRequest, LineError
from llm_operator.batch.state import Batch, NotNow, result_line, unanswered_line

REQUESTS = [BatchRequest(1, "a", "/v1/chat/completions", {"model": "gemma"}),
            BatchRequest(2, "b", "/v1/chat/completions", {"model": "gemma"})]


def batch() -> Batch:
    return Batch("batch_1", "team-a", "/v1/chat/completions", "file-1", created_at=1000,
                 metadata={"job": "nightly"})


def running() -> Batch:
    out = batch()
    out.validated(REQUESTS, [], now=1001)
    return out


def test_a_valid_file_starts_the_batch_and_counts_its_requests() -> None:
    b = running()
    shown = b.as_openai()
    assert (shown["status"], shown["request_counts"]) == (
        "in_progress", {"total": 2, "completed": 0, "failed": 0})
    assert (shown["created_at"], shown["in_progress_at"], shown["expires_at"]) == \
        (1000, 1001, 1000 + 24 * 3600)
    assert shown["errors"] is None and shown["metadata"] == {"job": "nightly"}
    assert "owner" not in shown and "team-a" not in str(shown)


def test_a_file_with_bad_lines_fails_the_batch_with_each_lines_error() -> None:
    b = batch()
    b.validated(REQUESTS[:1], [LineError("model_not_found", "no gpt-9", 2, "body.model")],
                now=1001)
    shown = b.as_openai()
    assert (shown["status"], shown["failed_at"]) == ("failed", 1001)
    assert shown["errors"] == {"object": "list", "data": [
        {"code": "model_not_found", "message": "no gpt-9", "param": "body.model",
         "line": 2}]}


def test_a_run_to_the_end() -> None:
    b = running()
    b.answered(ok=True)
    b.answered(ok=False)
    b.finalize(now=1005)
    b.close("file-out", "file-err", now=1006)
    shown = b.as_openai()
    assert (shown["status"], shown["finalizing_at"], shown["completed_at"]) == \
        ("completed", 1005, 1006)
    assert shown["request_counts"] == {"total": 2, "completed": 1, "failed": 1}
    assert (shown["output_file_id"], shown["error_file_id"]) == ("file-out", "file-err")


def test_a_cancelled_batch_keeps_what_ran_and_ends_cancelled() -> None:
    b = running()
    b.answered(ok=True)
    b.cancel(now=1003)
    b.answered(ok=True)  # a request already sent still counts
    b.finalize(now=1004)  # a cancelling batch stays cancelling while its files are written
    b.close("file-out", None, now=1005)
    shown = b.as_openai()
    assert (shown["status"], shown["cancelling_at"], shown["cancelled_at"]) == \
        ("cancelled", 1003, 1005)
    assert shown["request_counts"]["completed"] == 2


def test_an_expired_batch_ends_expired() -> None:
    b = running()
    b.close(None, "file-err", now=1000 + 24 * 3600, expired=True)
    assert b.as_openai()["status"] == "expired" and b.finished


def completed() -> Batch:
    b = running()
    b.finalize(now=1002)
    b.close("file-out", None, now=1003)
    return b


@pytest.mark.parametrize(("make", "change"), [
    (completed, lambda b: b.cancel(now=2000)),
    (running, lambda b: b.validated(REQUESTS, [], now=2000)),
    (batch, lambda b: b.answered(ok=True)),
    (completed, lambda b: b.finalize(now=2000)),
    (batch, lambda b: b.close(None, None, now=2000)),
], ids=["cancel-finished", "validate-twice", "answer-before-start", "finalize-finished",
        "close-unstarted"])
def test_a_change_the_status_does_not_allow_is_refused(
        make: Callable[[], Batch], change: Callable[[Batch], Any]) -> None:
    b = make()
    before = b.as_openai()
    with pytest.raises(NotNow, match="batch_1 is"):
        change(b)
    assert b.as_openai() == before  # nothing changed


def test_result_lines_are_openais_with_the_custom_id() -> None:
    assert result_line("batch_req_1", REQUESTS[0], 200, {"choices": []}, "req-9") == {
        "id": "batch_req_1", "custom_id": "a",
        "response": {"status_code": 200, "request_id": "req-9", "body": {"choices": []}},
        "error": None}
    assert unanswered_line("batch_req_2", REQUESTS[1], "batch_expired", "too late") == {
        "id": "batch_req_2", "custom_id": "b", "response": None,
        "error": {"code": "batch_expired", "message": "too late"}}
