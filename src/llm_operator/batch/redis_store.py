"""Where the router keeps batch files, batches and results: the shipped Redis, persisted.

Every router replica answers the Files and Batch APIs, so the store is shared: the Redis
that already holds limits and spend (config/redis: append-only file, fsync every second,
no eviction). A result is a hash field keyed by its input line, so a request run again
after a restart replaces its line; a batch's state is one JSON string. Ids are listed per
owner in sorted sets (created_at, then id), as the SQLite store orders them. The client is
synchronous: the runner and the API call the store from a worker thread, as they do
SQLite's.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import redis

from llm_operator.batch.state import Batch
from llm_operator.batch.store import ResultKind, StoredFile, new_file_id

KINDS: tuple[ResultKind, ResultKind] = ("output", "error")
LOOKUP = 500  # files' metadata read per round trip while listing


class RedisBatchStore:
    """Files, batches and results in Redis under ``prefix``."""

    errors: tuple[type[Exception], ...] = (redis.RedisError,)
    # no connection, or Redis loading its append-only file after a restart (a subclass)
    outages: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)

    def __init__(self, client: redis.Redis, prefix: str = "llmop") -> None:
        self.client, self._p = client, f"{prefix}:batch"

    # --- files ---------------------------------------------------------------------------

    def add_file(self, owner: str, filename: str, purpose: str, data: bytes,
                 now: int) -> StoredFile:
        stored = StoredFile(new_file_id(), owner, filename, purpose, now, len(data))
        with self.client.pipeline() as pipe:  # MULTI/EXEC: all of it or none
            pipe.set(f"{self._p}:data:{stored.id}", data)
            pipe.set(f"{self._p}:file:{stored.id}", json.dumps(asdict(stored)))
            pipe.zadd(f"{self._p}:files:{owner}", {stored.id: now})
            pipe.execute()
        return stored

    def file(self, file_id: str, owner: str) -> StoredFile | None:
        raw = self.client.get(f"{self._p}:file:{file_id}")
        if raw is None:
            return None
        found = StoredFile(**json.loads(raw))
        return found if found.owner == owner else None

    def files(self, owner: str, *, after: str | None = None, limit: int = 10_000,
              newest_first: bool = True, purpose: str | None = None
              ) -> tuple[list[StoredFile], bool]:
        """The owner's files (of ``purpose``), after the one named ``after``, a page.

        And whether more follow (OpenAI's ``has_more``).
        """
        key = f"{self._p}:files:{owner}"
        listed = self.client.zrevrange(key, 0, -1) if newest_first else \
            self.client.zrange(key, 0, -1)
        ids = [_text(i) for i in listed]
        if after is not None and after in ids:
            ids = ids[ids.index(after) + 1:]
        found: list[StoredFile] = []
        for start in range(0, len(ids), LOOKUP):
            chunk = ids[start:start + LOOKUP]
            for raw in self.client.mget([f"{self._p}:file:{i}" for i in chunk]):
                stored = StoredFile(**json.loads(raw)) if raw is not None else None
                if stored is not None and stored.owner == owner and \
                        purpose in (None, stored.purpose):
                    found.append(stored)
                    if len(found) > limit:
                        return found[:limit], True
        return found, False

    def content(self, file_id: str, owner: str) -> bytes | None:
        if self.file(file_id, owner) is None:
            return None
        data = self.client.get(f"{self._p}:data:{file_id}")
        return data if isinstance(data, bytes) else None

    def delete_file(self, file_id: str, owner: str) -> bool:
        if self.file(file_id, owner) is None:
            return False
        with self.client.pipeline() as pipe:
            pipe.delete(f"{self._p}:file:{file_id}", f"{self._p}:data:{file_id}")
            pipe.zrem(f"{self._p}:files:{owner}", file_id)
            pipe.execute()
        return True

    # --- batches -------------------------------------------------------------------------

    def save(self, batch: Batch) -> None:
        """Store the batch as it stands (after every change)."""
        with self.client.pipeline() as pipe:
            pipe.set(f"{self._p}:b:{batch.id}", json.dumps(asdict(batch)))
            pipe.zadd(f"{self._p}:batches:{batch.owner}", {batch.id: batch.created_at})
            if batch.finished:
                pipe.zrem(f"{self._p}:unfinished", batch.id)
            else:
                pipe.zadd(f"{self._p}:unfinished", {batch.id: batch.created_at})
            pipe.execute()

    def _load(self, batch_id: str) -> Batch | None:
        raw = self.client.get(f"{self._p}:b:{batch_id}")
        return None if raw is None else Batch(**json.loads(raw))

    def batch(self, batch_id: str, owner: str) -> Batch | None:
        found = self._load(batch_id)
        return found if found is not None and found.owner == owner else None

    def batches(self, owner: str, *, after: str | None = None, limit: int = 20
                ) -> tuple[list[Batch], bool]:
        """The owner's batches, newest first, after the one named ``after``.

        And whether more follow (OpenAI's ``has_more``).
        """
        key = f"{self._p}:batches:{owner}"
        start = 0
        if after is not None:
            rank = self.client.zrevrank(key, after)
            start = rank + 1 if isinstance(rank, int) else 0
        ids = self.client.zrevrange(key, start, start + limit)
        found = [b for b in (self._load(_text(i)) for i in ids) if b is not None]
        return found[:limit], len(found) > limit

    def unfinished(self) -> list[Batch]:
        """Every batch a runner must go on with after a restart, oldest first."""
        ids = self.client.zrange(f"{self._p}:unfinished", 0, -1)
        found = [self._load(_text(i)) for i in ids]
        return [b for b in found if b is not None and not b.finished]

    # --- results -------------------------------------------------------------------------

    def record(self, batch_id: str, line: int, kind: ResultKind, body: dict[str, Any]
               ) -> None:
        """One request's result line; a request run again replaces its line."""
        self.record_many(batch_id, kind, [(line, body)])

    def record_many(self, batch_id: str, kind: ResultKind,
                    lines: list[tuple[int, dict[str, Any]]]) -> None:
        """Result lines of one kind, in one MULTI/EXEC."""
        other = KINDS[1] if kind == KINDS[0] else KINDS[0]
        with self.client.pipeline() as pipe:
            pipe.hset(f"{self._p}:r:{batch_id}:{kind}",
                      mapping={str(line): json.dumps(body) for line, body in lines})
            pipe.hdel(f"{self._p}:r:{batch_id}:{other}", *(str(line) for line, _ in lines))
            pipe.execute()

    def done_lines(self, batch_id: str) -> set[int]:
        """The input lines that have a result (a restarted runner skips them)."""
        return {int(line) for kind in KINDS
                for line in self.client.hkeys(f"{self._p}:r:{batch_id}:{kind}")}

    def counts(self, batch_id: str) -> tuple[int, int]:
        """How many of a batch's requests are in its output file, and in its error file."""
        output, error = (int(self.client.hlen(f"{self._p}:r:{batch_id}:{kind}"))
                         for kind in KINDS)
        return output, error

    def results(self, batch_id: str, kind: ResultKind) -> list[dict[str, Any]]:
        """A batch's output or error lines, in input order."""
        lines = self.client.hgetall(f"{self._p}:r:{batch_id}:{kind}")
        return [json.loads(lines[line]) for line in sorted(lines, key=int)]


def _text(value: object) -> str:
    """A member as redis-py returns it (bytes) as text."""
    return value.decode() if isinstance(value, bytes) else str(value)
