"""A batch's life as OpenAI's Batch API shows it: statuses, counts, result lines (pure).

validating → in_progress → finalizing → completed, or failed (its file did not validate),
expired (its completion window ran out) and cancelling → cancelled. Every change is a
method that says whether it may happen now; a caller stores the batch after each. Output
and error files have one line per request, OpenAI's shape, with the request's custom_id.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from llm_operator.batch.input import BatchRequest, LineError

Status = Literal["validating", "failed", "in_progress", "finalizing", "completed",
                 "expired", "cancelling", "cancelled"]
FINISHED: frozenset[str] = frozenset({"failed", "completed", "expired", "cancelled"})
WINDOW_SECONDS = {"24h": 24 * 3600}  # the only completion window OpenAI offers


class NotNow(ValueError):
    """A change the batch's status does not allow (an OpenAI 409-style error)."""


@dataclass
class Batch:
    """One batch: what it runs, who owns it, where it stands."""

    id: str
    owner: str  # the client key id that created it ("" without client keys)
    endpoint: str
    input_file_id: str
    created_at: int
    completion_window: str = "24h"
    metadata: dict[str, str] | None = None
    status: Status = "validating"
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    output_file_id: str | None = None
    error_file_id: str | None = None
    stamps: dict[str, int] = field(default_factory=dict)  # "in_progress_at" -> Unix time

    @property
    def expires_at(self) -> int:
        return self.created_at + WINDOW_SECONDS[self.completion_window]

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def _to(self, status: Status, now: int) -> None:
        self.status = status
        self.stamps[f"{status}_at"] = now  # OpenAI's in_progress_at, cancelling_at, ...

    def validated(self, requests: list[BatchRequest], errors: list[LineError],
                  now: int) -> None:
        """The input file was read: in progress, or failed with its lines' errors."""
        if self.status != "validating":
            raise NotNow(f"batch {self.id} is {self.status}, not validating")
        if errors or not requests:
            self.errors = [e.as_openai() for e in errors] or [{
                "code": "empty_file", "message": "the input file has no requests",
                "param": None, "line": None}]
            self._to("failed", now)
            return
        self.total = len(requests)
        self._to("in_progress", now)

    def answered(self, ok: bool) -> None:
        """One request ran: to the output file (ok) or the error file."""
        if self.status not in ("in_progress", "cancelling"):
            raise NotNow(f"batch {self.id} is {self.status}: it runs no requests")
        if ok:
            self.completed += 1
        else:
            self.failed += 1

    def cancel(self, now: int) -> None:
        """Stop sending its requests; NotNow once it has finished."""
        if self.finished or self.status == "cancelling":
            raise NotNow(f"batch {self.id} is {self.status} and cannot be cancelled")
        self._to("cancelling", now)

    def finalize(self, now: int) -> None:
        """Every request ran (or the batch stops): its files are being written."""
        if self.status not in ("in_progress", "cancelling"):
            raise NotNow(f"batch {self.id} is {self.status}, not running")
        if self.status == "in_progress":
            self._to("finalizing", now)

    def close(self, output_file_id: str | None, error_file_id: str | None, now: int,
              *, expired: bool = False) -> None:
        """Its files are written: completed, cancelled or expired."""
        if self.status not in ("finalizing", "cancelling", "in_progress"):
            raise NotNow(f"batch {self.id} is {self.status}, not finalizing")
        self.output_file_id, self.error_file_id = output_file_id, error_file_id
        self._to("expired" if expired else "cancelled" if self.status == "cancelling"
                 else "completed", now)

    def fail(self, code: str, message: str, now: int) -> None:
        """It cannot go on (its store is full): failed with the reason; results kept."""
        if self.finished:
            raise NotNow(f"batch {self.id} is {self.status} already")
        self.errors = [{"code": code, "message": message, "param": None, "line": None}]
        self._to("failed", now)

    def as_openai(self) -> dict[str, Any]:
        """The batch object the API answers (the owner is not shown)."""
        stamps = {name: self.stamps.get(name) for name in (
            "in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
            "cancelling_at", "cancelled_at")}
        return {
            "id": self.id, "object": "batch", "endpoint": self.endpoint,
            "errors": {"object": "list", "data": self.errors} if self.errors else None,
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window, "status": self.status,
            "output_file_id": self.output_file_id, "error_file_id": self.error_file_id,
            "created_at": self.created_at, "expires_at": self.expires_at, **stamps,
            "request_counts": {"total": self.total, "completed": self.completed,
                               "failed": self.failed},
            "metadata": self.metadata}


def result_line(request_id: str, request: BatchRequest, status: int, body: Any,
                upstream_request_id: str) -> dict[str, Any]:
    """An answered request's line: the output file (2xx) or the error file (others)."""
    return {"id": request_id, "custom_id": request.custom_id,
            "response": {"status_code": status, "request_id": upstream_request_id,
                         "body": body},
            "error": None}


def unanswered_line(request_id: str, request: BatchRequest, code: str, message: str
                    ) -> dict[str, Any]:
    """The error file's line for a request that got no answer (expired, cancelled)."""
    return {"id": request_id, "custom_id": request.custom_id, "response": None,
            "error": {"code": code, "message": message}}
