"""Where `llmop up` keeps batch files, batches and their results: SQLite in its state dir.

One database file, written in transactions: a restart finds every file, every batch and
every result recorded before it. A result is keyed by its batch and input line, so a
request that runs again after a restart replaces its line instead of adding one: each
request appears once in the output. Files and batches belong to the client key that made
them; asked for by another key they do not exist.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from llm_operator.batch.state import Batch

ResultKind = Literal["output", "error"]
SCHEMA = """
CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, filename TEXT NOT NULL,
    purpose TEXT NOT NULL, created_at INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY, owner TEXT NOT NULL, created_at INTEGER NOT NULL,
    state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    batch_id TEXT NOT NULL, line INTEGER NOT NULL, kind TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (batch_id, line));
"""


@dataclass(frozen=True)
class StoredFile:
    """A file as OpenAI's Files API shows it (its bytes are read apart)."""

    id: str
    owner: str
    filename: str
    purpose: str
    created_at: int
    bytes: int

    def as_openai(self) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": self.bytes,
                "created_at": self.created_at, "filename": self.filename,
                "purpose": self.purpose, "status": "processed"}


def new_file_id() -> str:
    return f"file-{secrets.token_hex(12)}"


def new_batch_id() -> str:
    return f"batch_{secrets.token_hex(12)}"


class Store(Protocol):
    """What the Batch API and its runner keep their files, batches and results in.

    ``BatchStore`` (SQLite, `llmop up`) or ``RedisBatchStore`` (the router's). Every call
    blocks: callers use a thread.
    """

    def add_file(self, owner: str, filename: str, purpose: str, data: bytes,
                 now: int) -> StoredFile: ...
    def file(self, file_id: str, owner: str) -> StoredFile | None: ...
    def files(self, owner: str, *, after: str | None = None, limit: int = 10_000,
              newest_first: bool = True, purpose: str | None = None
              ) -> tuple[list[StoredFile], bool]: ...
    def content(self, file_id: str, owner: str) -> bytes | None: ...
    def delete_file(self, file_id: str, owner: str) -> bool: ...
    def save(self, batch: Batch) -> None: ...
    def batch(self, batch_id: str, owner: str) -> Batch | None: ...
    def batches(self, owner: str, *, after: str | None = None, limit: int = 20
                ) -> tuple[list[Batch], bool]: ...
    def unfinished(self) -> list[Batch]: ...
    def record(self, batch_id: str, line: int, kind: ResultKind, body: dict[str, Any]
               ) -> None: ...
    def record_many(self, batch_id: str, kind: ResultKind,
                    lines: list[tuple[int, dict[str, Any]]]) -> None: ...
    def done_lines(self, batch_id: str) -> set[int]: ...
    def counts(self, batch_id: str) -> tuple[int, int]: ...
    def results(self, batch_id: str, kind: ResultKind) -> list[dict[str, Any]]: ...

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """What a call that failed raises (a full disk, a full Redis, no connection)."""
        ...

    @property
    def outages(self) -> tuple[type[Exception], ...]:
        """Those of ``errors`` that pass: the store unreachable for now (Redis restarting)."""
        ...


class BatchStore:
    """Files, batches and results in one SQLite database (``path``)."""

    errors: tuple[type[Exception], ...] = (sqlite3.Error,)
    outages: tuple[type[Exception], ...] = ()  # a local file is there or it is not

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._db() as db:
            db.executescript(SCHEMA)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        """A connection whose block is one transaction (committed, or rolled back)."""
        with closing(sqlite3.connect(self.path)) as db, db:
            yield db

    # --- files ---------------------------------------------------------------------------

    def add_file(self, owner: str, filename: str, purpose: str, data: bytes,
                 now: int) -> StoredFile:
        stored = StoredFile(new_file_id(), owner, filename, purpose, now, len(data))
        with self._db() as db:
            db.execute("INSERT INTO files VALUES (?, ?, ?, ?, ?, ?)",
                       (stored.id, owner, filename, purpose, now, data))
        return stored

    def file(self, file_id: str, owner: str) -> StoredFile | None:
        with self._db() as db:
            row = db.execute("SELECT id, owner, filename, purpose, created_at, length(data) "
                             "FROM files WHERE id = ? AND owner = ?",
                             (file_id, owner)).fetchone()
        return StoredFile(*row) if row else None

    def files(self, owner: str, *, after: str | None = None, limit: int = 10_000,
              newest_first: bool = True, purpose: str | None = None
              ) -> tuple[list[StoredFile], bool]:
        """The owner's files (of ``purpose``), after the one named ``after``, a page.

        And whether more follow (OpenAI's ``has_more``).
        """
        order, past = ("DESC", "<") if newest_first else ("ASC", ">")
        query = ("SELECT id, owner, filename, purpose, created_at, length(data) FROM files "
                 "WHERE owner = ?")
        args: list[Any] = [owner]
        if purpose is not None:
            query += " AND purpose = ?"
            args.append(purpose)
        with self._db() as db:
            if after is not None and (start := db.execute(
                    "SELECT created_at, id FROM files WHERE id = ? AND owner = ?",
                    (after, owner)).fetchone()) is not None:
                query += f" AND (created_at, id) {past} (?, ?)"
                args += list(start)
            rows = db.execute(query + f" ORDER BY created_at {order}, id {order} LIMIT ?",
                              [*args, limit + 1]).fetchall()
        return [StoredFile(*row) for row in rows[:limit]], len(rows) > limit

    def content(self, file_id: str, owner: str) -> bytes | None:
        with self._db() as db:
            row = db.execute("SELECT data FROM files WHERE id = ? AND owner = ?",
                             (file_id, owner)).fetchone()
        return bytes(row[0]) if row else None

    def delete_file(self, file_id: str, owner: str) -> bool:
        with self._db() as db:
            return db.execute("DELETE FROM files WHERE id = ? AND owner = ?",
                              (file_id, owner)).rowcount == 1

    # --- batches -------------------------------------------------------------------------

    def save(self, batch: Batch) -> None:
        """Store the batch as it stands (after every change)."""
        with self._db() as db:
            db.execute("INSERT INTO batches VALUES (?, ?, ?, ?) ON CONFLICT(id) DO UPDATE "
                       "SET state = excluded.state",
                       (batch.id, batch.owner, batch.created_at,
                        json.dumps(asdict(batch))))

    def batch(self, batch_id: str, owner: str) -> Batch | None:
        with self._db() as db:
            row = db.execute("SELECT state FROM batches WHERE id = ? AND owner = ?",
                             (batch_id, owner)).fetchone()
        return Batch(**json.loads(row[0])) if row else None

    def batches(self, owner: str, *, after: str | None = None, limit: int = 20
                ) -> tuple[list[Batch], bool]:
        """The owner's batches, newest first, after the one named ``after``.

        And whether more follow (OpenAI's ``has_more``).
        """
        with self._db() as db:
            start = None
            if after is not None:
                start = db.execute("SELECT created_at, id FROM batches WHERE id = ? AND "
                                   "owner = ?", (after, owner)).fetchone()
            query = "SELECT state FROM batches WHERE owner = ?"
            args: list[Any] = [owner]
            if start is not None:
                query += " AND (created_at, id) < (?, ?)"
                args += list(start)
            rows = db.execute(query + " ORDER BY created_at DESC, id DESC LIMIT ?",
                              [*args, limit + 1]).fetchall()
        found = [Batch(**json.loads(row[0])) for row in rows[:limit]]
        return found, len(rows) > limit

    def unfinished(self) -> list[Batch]:
        """Every batch a runner must go on with after a restart, oldest first."""
        with self._db() as db:
            rows = db.execute("SELECT state FROM batches ORDER BY created_at, id").fetchall()
        return [b for b in (Batch(**json.loads(r[0])) for r in rows) if not b.finished]

    # --- results -------------------------------------------------------------------------

    def record(self, batch_id: str, line: int, kind: ResultKind, body: dict[str, Any]
               ) -> None:
        """One request's result line; a request run again replaces its line."""
        self.record_many(batch_id, kind, [(line, body)])

    def record_many(self, batch_id: str, kind: ResultKind,
                    lines: list[tuple[int, dict[str, Any]]]) -> None:
        """Result lines of one kind, in one transaction."""
        with self._db() as db:
            db.executemany("INSERT INTO results VALUES (?, ?, ?, ?) ON CONFLICT(batch_id, "
                           "line) DO UPDATE SET kind = excluded.kind, body = excluded.body",
                           [(batch_id, line, kind, json.dumps(body)) for line, body in lines])

    def done_lines(self, batch_id: str) -> set[int]:
        """The input lines that have a result (a restarted runner skips them)."""
        with self._db() as db:
            rows = db.execute("SELECT line FROM results WHERE batch_id = ?",
                              (batch_id,)).fetchall()
        return {row[0] for row in rows}

    def counts(self, batch_id: str) -> tuple[int, int]:
        """How many of a batch's requests are in its output file, and in its error file."""
        with self._db() as db:
            rows = dict(db.execute("SELECT kind, count(*) FROM results WHERE batch_id = ? "
                                   "GROUP BY kind", (batch_id,)).fetchall())
        return rows.get("output", 0), rows.get("error", 0)

    def results(self, batch_id: str, kind: ResultKind) -> list[dict[str, Any]]:
        """A batch's output or error lines, in input order."""
        with self._db() as db:
            rows = db.execute("SELECT body FROM results WHERE batch_id = ? AND kind = ? "
                              "ORDER BY line", (batch_id, kind)).fetchall()
        return [json.loads(row[0]) for row in rows]
