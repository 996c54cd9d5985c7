"""OpenAI's Files and Batch APIs on the gateway: uploads, batches, their results.

``POST /v1/files`` (purpose ``batch``), ``GET /v1/files[/{id}[/content]]``, ``DELETE
/v1/files/{id}``; ``POST /v1/batches``, ``GET /v1/batches[/{id}]``, ``POST
/v1/batches/{id}/cancel``, as the OpenAI SDK calls them. Files and batches belong to the
calling client key (without client keys, to everyone); another key's are not found (404).
The work is the ``BatchRunner``'s; this object answers the API and wakes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import BodyPartReader, web

from llm_operator.batch.input import ENDPOINTS, MAX_BYTES, FileRefused, check_upload
from llm_operator.batch.runner import BatchRunner, RunnerSettings
from llm_operator.batch.state import WINDOW_SECONDS, Batch, NotNow
from llm_operator.batch.store import BatchStore, Store, new_batch_id
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.settings.config import Batches, SharedState

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
MAX_METADATA = 16  # OpenAI's: 16 pairs, keys to 64 characters, values to 512
PURPOSE = "batch"
# A Redis call of the Batch API waits this long for a byte (or a connection) before the
# store counts as unreachable (503, batch_store_unavailable; the runner waits it out). After
# Redis's pod is replaced, a connection to the old pod gets no answer at all: 30 s here held
# every Files and Batch call that long after Redis was back (the real-node suite saw it).
STORE_TIMEOUT_SECONDS = 5.0
STORE_CONNECT_SECONDS = 2.0
RETRY_AFTER_SECONDS = 5  # a refused call's Retry-After: a replaced Redis pod is back in seconds


def open_store(settings: Batches, shared: SharedState | None) -> Store:
    """The configured store: SQLite at ``batch.path``, else the ``redis`` every replica uses."""
    if settings.path is not None:
        return BatchStore(Path(settings.path))
    assert shared is not None  # the config's validator: one of the two is set
    import redis  # noqa: PLC0415  (~0.2 s: only where the store is Redis)

    from llm_operator.batch.redis_store import RedisBatchStore  # noqa: PLC0415

    client = redis.Redis.from_url(shared.url, password=shared.password(),
                                  socket_timeout=STORE_TIMEOUT_SECONDS,
                                  socket_connect_timeout=STORE_CONNECT_SECONDS)
    return RedisBatchStore(client, shared.key_prefix)


def runner_settings(settings: Batches) -> RunnerSettings:
    return RunnerSettings(concurrency=settings.concurrency, retry_seconds=settings.retry_seconds,
                          idle_seconds=settings.poll_seconds, wake_models=settings.wake_models)


def own_address(host: str, port: int) -> str:
    """Where a server listening on ``host``:``port`` reaches itself."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class Refusal(Exception):
    """The answer a Files or Batch handler gives instead; caught where the handler is.

    Never raised out of a handler, nor anywhere on the request path.
    """

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


class BatchApi:
    """The Files and Batch endpoints over one store, one runner."""

    def __init__(self, runner: BatchRunner, owner: Callable[[web.Request], str | web.Response],
                 now: Callable[[], float] = time.time) -> None:
        self.runner, self._owner, self._now = runner, owner, now
        self.store = runner.store  # the one the runner works from

    def add_routes(self, router: web.UrlDispatcher,
                   errors: Callable[[Handler], Handler] = lambda handler: handler) -> None:
        """The endpoints, each wrapped in ``errors`` (the gateway answers what they raise)."""
        for method, path, handler in (
                ("POST", "/v1/files", self.upload), ("GET", "/v1/files", self.files),
                ("GET", "/v1/files/{id}", self.file),
                ("GET", "/v1/files/{id}/content", self.content),
                ("DELETE", "/v1/files/{id}", self.delete),
                ("POST", "/v1/batches", self.create), ("GET", "/v1/batches", self.batches),
                ("GET", "/v1/batches/{id}", self.batch),
                ("POST", "/v1/batches/{id}/cancel", self.cancel)):
            router.add_route(method, path, errors(self._answering(handler)))

    async def listing(self, owner: str, limit: int = 50) -> list[dict[str, Any]]:
        """The owner's batches as GET /v1/batches lists them, a running one's counts as now."""
        found, _ = await asyncio.to_thread(self.store.batches, owner, limit=limit)
        return [(self.runner.running(b.id) or b).as_openai() for b in found]

    def _answering(self, handler: Callable[[web.Request, str], Awaitable[web.StreamResponse]]
                   ) -> Handler:
        """The handler with its caller identified; a Refusal becomes its answer."""
        async def answer(request: web.Request) -> web.StreamResponse:
            owner = self._owner(request)
            if isinstance(owner, web.Response):
                return owner  # the 401
            try:
                response: web.StreamResponse = await handler(request, owner)
            except Refusal as refused:
                return refused.response
            except self.store.errors as exc:  # a full disk, a full or unreachable Redis
                log.error("batch store: %s %s: %s", request.method, request.path, exc)
                return error_response(503, f"the batch store refused this ({exc}); nothing "
                                      "was changed: retry later", "server_error",
                                      "batch_store_unavailable",
                                      headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
            return response
        return answer

    # --- files ---------------------------------------------------------------------------

    async def upload(self, request: web.Request, owner: str) -> web.Response:
        purpose, filename, data = await _form(request)
        if purpose != PURPOSE:
            raise _bad(f"purpose {purpose!r} is not served here: upload batch input files "
                       "with purpose 'batch'", "purpose")
        try:
            check_upload(data)
        except FileRefused as exc:
            raise _bad(str(exc), "file") from None
        stored = await asyncio.to_thread(self.store.add_file, owner, filename, purpose, data,
                                         int(self._now()))
        return web.json_response(stored.as_openai())

    async def files(self, request: web.Request, owner: str) -> web.Response:
        """OpenAI's files.list: newest first (``order=asc``: oldest), ``limit`` a page."""
        limit = _limit(request, 10_000)
        order = request.query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise _bad(f"order must be asc or desc, not {order!r}", "order")
        found, more = await asyncio.to_thread(
            self.store.files, owner, after=request.query.get("after"), limit=limit,
            newest_first=order == "desc", purpose=request.query.get("purpose"))
        return _page([f.as_openai() for f in found], more)

    async def file(self, request: web.Request, owner: str) -> web.Response:
        found = await asyncio.to_thread(self.store.file, request.match_info["id"], owner)
        if found is None:
            raise _no_file(request.match_info["id"])
        return web.json_response(found.as_openai())

    async def content(self, request: web.Request, owner: str) -> web.Response:
        data = await asyncio.to_thread(self.store.content, request.match_info["id"], owner)
        if data is None:
            raise _no_file(request.match_info["id"])
        return web.Response(body=data, content_type="application/jsonl")

    async def delete(self, request: web.Request, owner: str) -> web.Response:
        file_id = request.match_info["id"]
        if not await asyncio.to_thread(self.store.delete_file, file_id, owner):
            raise _no_file(file_id)
        return web.json_response({"id": file_id, "object": "file", "deleted": True})

    # --- batches -------------------------------------------------------------------------

    async def create(self, request: web.Request, owner: str) -> web.Response:
        try:
            asked = await request.json()
        except ValueError:
            raise _bad("the request body is not valid JSON", None) from None
        if not isinstance(asked, dict):
            raise _bad("the request body must be a JSON object", None)
        endpoint, window = asked.get("endpoint"), asked.get("completion_window")
        if endpoint not in ENDPOINTS:
            raise _bad(f"endpoint {endpoint!r} is not one a batch may use: "
                       f"{', '.join(ENDPOINTS)}", "endpoint")
        if window not in WINDOW_SECONDS:
            raise _bad(f"completion_window {window!r} is not offered: use "
                       f"{', '.join(WINDOW_SECONDS)}", "completion_window")
        metadata = asked.get("metadata")
        if metadata is not None and not _valid_metadata(metadata):
            raise _bad(f"metadata must be an object of at most {MAX_METADATA} string pairs "
                       "(keys up to 64 characters, values up to 512)", "metadata")
        file_id = asked.get("input_file_id")
        if not isinstance(file_id, str) or \
                await asyncio.to_thread(self.store.file, file_id, owner) is None:
            raise _no_file(str(file_id), "input_file_id")
        batch = Batch(new_batch_id(), owner, endpoint, file_id,
                      int(self._now()), window, metadata)
        await asyncio.to_thread(self.store.save, batch)
        self.runner.wake()
        return web.json_response(batch.as_openai())

    async def batch(self, request: web.Request, owner: str) -> web.Response:
        return web.json_response((await self._batch(request, owner)).as_openai())

    async def batches(self, request: web.Request, owner: str) -> web.Response:
        limit = _limit(request, 100, default=20)
        found, more = await asyncio.to_thread(self.store.batches, owner,
                                              after=request.query.get("after"), limit=limit)
        return _page([(self.runner.running(b.id) or b).as_openai() for b in found], more)

    async def cancel(self, request: web.Request, owner: str) -> web.Response:
        batch = await self._batch(request, owner)
        try:
            batch = await self.runner.cancel(batch)
        except NotNow as exc:
            raise Refusal(error_response(409, f"{exc}; only a batch that has not finished "
                                         "can be cancelled", "invalid_request_error",
                                         "batch_not_cancellable")) from None
        return web.json_response(batch.as_openai())

    async def _batch(self, request: web.Request, owner: str) -> Batch:
        batch_id = request.match_info["id"]
        batch = self.runner.running(batch_id)
        if batch is not None and batch.owner == owner:
            return batch  # its counts as they are now
        batch = await asyncio.to_thread(self.store.batch, batch_id, owner)
        if batch is None:
            raise Refusal(error_response(404, f"no batch {batch_id!r} here",
                                         "invalid_request_error", "not_found"))
        return batch


async def _form(request: web.Request) -> tuple[str, str, bytes]:
    """The upload's purpose, file name and bytes; Refusal when it is not one."""
    if not request.content_type.startswith("multipart/"):
        raise _bad("upload a file as multipart/form-data with the fields 'file' and "
                   "'purpose' (as the OpenAI SDK's files.create does)", "file")
    purpose, filename, data = None, "", None
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        if part.name == "purpose":
            purpose = (await part.text()).strip()
        elif part.name == "file":
            filename = part.filename or "upload.jsonl"
            data = await _read_capped(part)
    if purpose is None:
        raise _bad("the form needs a 'purpose' field ('batch')", "purpose")
    if data is None:
        raise _bad("the form needs a 'file' field: the JSONL batch input", "file")
    return purpose, filename, data


async def _read_capped(part: BodyPartReader) -> bytes:
    chunks, size = [], 0
    while chunk := await part.read_chunk(1 << 20):
        size += len(chunk)
        if size > MAX_BYTES:
            raise Refusal(error_response(  # a 400, as OpenAI answers it
                400, f"the file is over {_size(MAX_BYTES)}, the most a batch input file "
                "may be; split it into several batches", "invalid_request_error",
                "file_too_large", param="file"))
        chunks.append(chunk)
    return b"".join(chunks)


def _size(limit: int) -> str:
    mib = 1024 * 1024
    return f"{limit // mib} MB" if limit % mib == 0 else f"{limit:,} bytes"


def _valid_metadata(metadata: object) -> bool:
    return isinstance(metadata, dict) and len(metadata) <= MAX_METADATA and all(
        isinstance(k, str) and isinstance(v, str) and len(k) <= 64 and len(v) <= 512
        for k, v in metadata.items())


def _limit(request: web.Request, most: int, default: int | None = None) -> int:
    """The ``limit`` query parameter: a page's length, 1 to ``most``."""
    try:
        limit = int(request.query.get("limit", str(default or most)))
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise _bad(f"limit must be a whole number from 1 to {most}", "limit")
    return limit


def _page(data: list[dict[str, Any]], more: bool) -> web.Response:
    """One page of an OpenAI list (pass the last id as ``after`` for the next)."""
    return web.json_response({"object": "list", "data": data, "has_more": more,
                              "first_id": data[0]["id"] if data else None,
                              "last_id": data[-1]["id"] if data else None})


def _bad(message: str, param: str | None) -> Refusal:
    return Refusal(error_response(400, message, "invalid_request_error", "invalid_request",
                                  param=param))


def _no_file(file_id: str, param: str | None = None) -> Refusal:
    return Refusal(error_response(404, f"no file {file_id!r} here", "invalid_request_error",
                                  "not_found", param=param))
