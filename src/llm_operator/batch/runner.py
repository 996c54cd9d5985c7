"""The batch runner: each unfinished batch's requests sent through the gateway, results kept.

One runner per store. It validates a new batch's file, then sends each request that has no
result yet to the gateway's own address (loopback) as the batch's owner, in the lowest
flow-control band: batch work waits behind interactive traffic in the same queues, is
limited and charged like any request of its key. A refusal that means "not now" (429,
503: a full queue, no replica yet) is retried after its Retry-After until the batch's
window closes; any other answer is the request's result, recorded before the batch's
counts. After a restart the runner goes on from the store: a request whose result was
recorded is not sent again, one in flight is sent again and replaces its line.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp

from llm_operator.batch.input import BatchRequest, FileRefused, read_requests
from llm_operator.batch.state import Batch, NotNow, result_line, unanswered_line
from llm_operator.batch.store import ResultKind, Store

log = logging.getLogger(__name__)

T = TypeVar("T")

RUN_HEADER = "x-llmop-batch-run"  # the runner's secret: the gateway trusts the owner header
OWNER_HEADER = "x-llmop-batch-owner"  # the client key the request runs as
OBJECTIVE_HEADER = "x-gateway-inference-objective"
NOT_NOW = frozenset({429, 502, 503, 504})  # retried until the window closes
OUTPUT_PURPOSE, ERROR_PURPOSE = "batch_output", "batch_error"


def _any_model(_: str) -> bool:
    """A validated batch's lines all run (``served`` for a batch read again)."""
    return True


@dataclass(frozen=True)
class RunnerSettings:
    """How the runner sends: how many at once, in which band, and when it may wake."""

    concurrency: int = 16  # requests in flight at once (batches run one after another)
    band: str = "batch"  # the flow-control band (objective header) its requests ask for
    retry_seconds: float = 5.0  # after a "not now" without Retry-After, or no connection
    idle_seconds: float = 2.0  # how often an idle runner looks for new or expired batches
    wake_models: bool = False  # send to a model with no replica (it scales up from zero)


class BatchRunner:
    """Runs the store's unfinished batches, oldest first, until stopped."""

    def __init__(self, store: Store, base_url: Callable[[], str], *,
                 served: Callable[[str], bool], has_replica: Callable[[str], bool],
                 settings: RunnerSettings | None = None,
                 now: Callable[[], float] = time.time,
                 counted: Callable[[str], None] = lambda outcome: None,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.store, self._base_url = store, base_url
        self._served, self._has_replica = served, has_replica
        self.settings = settings or RunnerSettings()
        self._now, self._counted, self._on_change = now, counted, on_change
        self.unfinished = 0  # batches not finished, at the runner's last look
        self.token = secrets.token_urlsafe(32)  # only this process's runner knows it
        self._wake = asyncio.Event()
        self._active: dict[str, Batch] = {}  # running now: the runner writes them
        self._stops: dict[str, asyncio.Event] = {}  # set when a running batch is cancelled
        self._unstored: dict[str, Batch] = {}  # failed, and the store refused that too
        self._http: aiohttp.ClientSession | None = None
        self.changed = asyncio.Event()  # set whenever the runner stores a batch
        self.outage: str | None = None  # why the store is unreachable, while it is

    def wake(self) -> None:
        """A batch was created or cancelled: look again now."""
        self._wake.set()

    def summary(self) -> dict[str, Any]:
        """What `llmop status` shows: how many wait, and the one being run."""
        return {"unfinished": self.unfinished, "running": [
            {"id": b.id, "status": b.status, "total": b.total, "completed": b.completed,
             "failed": b.failed} for b in self._active.values()]}

    def left(self) -> int:
        """Requests of the batches being run that have no result yet."""
        return sum(b.total - b.completed - b.failed for b in self._active.values())

    def running(self, batch_id: str) -> Batch | None:
        """The runner's own copy of a batch: running now, or failed where the store is."""
        return self._active.get(batch_id) or self._unstored.get(batch_id)

    async def cancel(self, batch: Batch) -> Batch:
        """Cancel a batch (NotNow once finished); a running one stops sending at once."""
        current = self._active.get(batch.id, batch)
        current.cancel(int(self._now()))
        await asyncio.to_thread(self.store.save, current)
        if (stop := self._stops.get(batch.id)) is not None:
            stop.set()
        return current

    async def run(self) -> None:
        """Until cancelled: every unfinished batch, then wait for a new one."""
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        try:
            while True:
                self._wake.clear()
                try:
                    waiting = await self._stored(self.store.unfinished)
                    if len(waiting) != self.unfinished:
                        self.unfinished = len(waiting)
                        self._on_change()
                    for batch in waiting:
                        if batch.id not in self._unstored:
                            await self._run_one(batch)
                except Exception:  # the store unreachable: look again at the next round
                    log.exception("the batch runner could not go on; retrying in %.0f s",
                                  self.settings.idle_seconds)
                try:
                    async with asyncio.timeout(self.settings.idle_seconds):
                        await self._wake.wait()
                except TimeoutError:
                    pass  # look for batches whose window closed
        finally:
            await self._http.close()

    async def _stored(self, call: Callable[..., T], *args: Any) -> T:
        """A store call off the event loop, waited out while the store is unreachable.

        A restarting Redis is an outage, not a failure: the call is tried again every
        ``retry_seconds`` (said once in the log), so the batch goes on where it was. A call
        cancelled midway (a worker stopped when another's write failed) returns only once
        its thread has: a write under way lands before what follows the cancel, never over
        it (a batch stored as failed, then overwritten as in progress).
        """
        while True:
            try:
                result = await _finished(asyncio.to_thread(call, *args))
            except self.store.outages as exc:
                if self.outage is None:
                    log.warning("the batch store is unreachable (%s); batches wait for it, "
                                "trying again every %g s", exc, self.settings.retry_seconds)
                    self.outage = str(exc)
                    self.changed.set()
                await asyncio.sleep(self.settings.retry_seconds)
                continue
            if self.outage is not None:
                log.warning("the batch store is reachable again; batches go on")
                self.outage = None
                self.changed.set()
            return result

    # --- one batch -----------------------------------------------------------------------

    async def _run_one(self, batch: Batch) -> None:
        data = await self._stored(self.store.content, batch.input_file_id, batch.owner)
        try:
            if data is None:
                raise FileRefused(f"the input file {batch.input_file_id} was deleted")
            # validated once, when created: read again after a restart, every line runs (a
            # model not routed yet must not drop its lines; a removed one answers 404)
            served = self._served if batch.status == "validating" else _any_model
            requests, errors = read_requests(data, batch.endpoint, served)
        except FileRefused as exc:
            batch.fail("invalid_file", str(exc), int(self._now()))
            await self._save(batch)
            return
        if batch.status == "validating":
            batch.validated(requests, errors, int(self._now()))
            await self._save(batch)
            if batch.finished:  # its file did not validate
                return
        done = await self._stored(self.store.done_lines, batch.id)
        batch.completed, batch.failed = await self._stored(self.store.counts, batch.id)
        self._active[batch.id] = batch
        self._stops[batch.id] = asyncio.Event()
        try:
            todo = deque(r for r in requests if r.line not in done)
            if batch.status == "in_progress" and todo:
                watching = asyncio.create_task(self._watch(batch))
                try:
                    async with asyncio.TaskGroup() as group:
                        for _ in range(min(self.settings.concurrency, len(todo))):
                            group.create_task(self._work(batch, todo))
                finally:
                    watching.cancel()
            await self._close(batch, requests)
        except* self.store.errors as refused:  # a full disk, a full Redis
            await self._store_failed(batch, refused.exceptions[0])
        finally:
            del self._active[batch.id], self._stops[batch.id]

    async def _store_failed(self, batch: Batch, error: BaseException) -> None:
        """The store refused a write: the batch fails saying so; its results are kept."""
        log.error("batch %s: the store refused a write (%s); the batch fails", batch.id,
                  error)
        with suppress(NotNow):
            batch.fail("store_write_failed", f"the batch store refused a write ({error}); "
                       "the results recorded so far are kept; make room and create the "
                       "batch again for the rest", int(self._now()))
        try:
            await self._stored(self.store.save, batch)
        except self.store.errors as again:
            log.error("batch %s: its failure could not be stored either (%s); it is taken "
                      "up again at the next start", batch.id, again)
            self._unstored[batch.id] = batch  # shown as failed until then
        self.changed.set()
        self._on_change()

    async def _work(self, batch: Batch, todo: deque[BatchRequest]) -> None:
        """One of ``concurrency`` workers: the next request, until none is left."""
        while todo and not self._stopped(batch):
            await self._send(batch, todo.popleft())

    async def _watch(self, batch: Batch) -> None:
        """Every ``idle_seconds``: a cancel another replica stored stops this batch."""
        while True:
            await asyncio.sleep(self.settings.idle_seconds)
            stored = await self._stored(self.store.batch, batch.id, batch.owner)
            if stored is not None and stored.status == "cancelling":
                await self._save(batch)  # takes the cancel up
                return

    async def _send(self, batch: Batch, request: BatchRequest) -> None:
        """One request, retried while the answer is "not now"; its result recorded."""
        while not self._stopped(batch):
            if not (self.settings.wake_models or self._has_replica(request.model)):
                await self._pause(self.settings.retry_seconds, batch)
                continue
            answer = await self._post(batch, request)
            if isinstance(answer, float):
                self._counted("retried")
                await self._pause(answer, batch)
                continue
            status, body, upstream_id = answer
            line = result_line(f"batch_req_{secrets.token_hex(12)}", request, status, body,
                               upstream_id)
            ok = 200 <= status < 300
            await self._stored(self.store.record, batch.id, request.line,
                                    "output" if ok else "error", line)
            batch.answered(ok)
            self._counted("completed" if ok else "failed")
            await self._save(batch)
            return

    async def _post(self, batch: Batch, request: BatchRequest
                    ) -> tuple[int, Any, str] | float:
        """The gateway's answer, or how long to wait before trying again."""
        assert self._http is not None
        headers = {RUN_HEADER: self.token, OWNER_HEADER: batch.owner,
                   OBJECTIVE_HEADER: self.settings.band}
        try:
            async with self._http.post(self._base_url() + request.url, json=request.body,
                                       headers=headers) as resp:
                raw = await resp.read()
                if resp.status in NOT_NOW:
                    return _retry_after(resp.headers.get("Retry-After"),
                                        self.settings.retry_seconds)
                try:
                    body: Any = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                return resp.status, body, resp.headers.get("x-request-id", "")
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("batch %s: the gateway did not answer (%s); retrying", batch.id, exc)
            return self.settings.retry_seconds

    async def _save(self, batch: Batch) -> None:
        """Store the runner's copy; a cancel another replica stored is taken up first."""
        stored = await self._stored(self.store.batch, batch.id, batch.owner)
        if stored is not None and stored.status == "cancelling" \
                and batch.status in ("in_progress", "finalizing"):
            batch.status, batch.stamps = "cancelling", {**batch.stamps, **stored.stamps}
            if (stop := self._stops.get(batch.id)) is not None:
                stop.set()
        await self._stored(self.store.save, batch)
        self.changed.set()
        self._on_change()

    def _stopped(self, batch: Batch) -> bool:
        return batch.status != "in_progress" or self._now() >= batch.expires_at

    async def _pause(self, seconds: float, batch: Batch) -> None:
        """Wait ``seconds``, or less when the batch is cancelled or its window closes."""
        left = max(0.0, batch.expires_at - self._now())
        try:
            async with asyncio.timeout(min(seconds, left)):
                await self._stops[batch.id].wait()
        except TimeoutError:
            pass

    async def _close(self, batch: Batch, requests: list[BatchRequest]) -> None:
        """Unsent requests to the error file (cancelled, expired), then both files."""
        now = int(self._now())
        expired = batch.status == "in_progress" and now >= batch.expires_at
        if batch.status == "in_progress" and not expired:
            batch.finalize(now)
            await self._save(batch)
        done = await self._stored(self.store.done_lines, batch.id)
        code, why = ("batch_expired", "the batch's completion window closed before this "
                     "request ran") if expired else \
            ("batch_cancelled", "the batch was cancelled before this request ran")
        unsent = [(r.line, unanswered_line(f"batch_req_{secrets.token_hex(12)}", r, code,
                                           why)) for r in requests if r.line not in done]
        if unsent:  # one write, not one per line: a cancelled batch may have 50,000
            await self._stored(self.store.record_many, batch.id, "error", unsent)
        output, error = await self._stored(self._files, batch)
        with suppress(NotNow):  # cancelled meanwhile: it closes as cancelled
            batch.close(output, error, now, expired=expired)
        await self._save(batch)

    def _files(self, batch: Batch) -> tuple[str | None, str | None]:
        """The output and error files (JSONL, input order); None for an empty one."""
        ids: list[str | None] = []
        kinds: tuple[tuple[ResultKind, str], ...] = (("output", OUTPUT_PURPOSE),
                                                     ("error", ERROR_PURPOSE))
        for kind, purpose in kinds:
            lines = self.store.results(batch.id, kind)
            if not lines:
                ids.append(None)
                continue
            data = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
            stored = self.store.add_file(batch.owner, f"{batch.id}_{kind}.jsonl", purpose,
                                         data.encode(), int(self._now()))
            ids.append(stored.id)
        return ids[0], ids[1]


def _retry_after(header: str | None, default: float) -> float:
    try:
        return max(0.1, float(header)) if header else default
    except ValueError:
        return default


async def _finished(call: Awaitable[T]) -> T:
    """``call``'s result; cancelled, its work (a thread) is waited out before the cancel."""
    running = asyncio.ensure_future(call)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        if not running.cancelled():
            running.exception()  # retrieved: the cancel is what the caller sees
        raise
