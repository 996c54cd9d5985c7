"""Relaying an upstream's answer to the client: plain or streamed, native APIs' shapes.

Usage is read from the answer (the body, or the stream's last events) and accounted: the
route's token metrics and cost, the limits' reservation, the client key's spend.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from llm_operator.access.limits import Reservation
from llm_operator.gateway.assembling import StreamError, assemble
from llm_operator.gateway.clients import Client
from llm_operator.gateway.http1 import Response as UpstreamResponse
from llm_operator.gateway.http1 import UpstreamError
from llm_operator.gateway.inbound.messages import (
    StreamTranslator,
    error_body,
    from_openai,
)
from llm_operator.gateway.routes import (
    ANTHROPIC,
    BATCH_RUN,
    STREAM_STARTED,
    RouteState,
    RouteTable,
)
from llm_operator.gateway.sse import (
    split_events,
    sse_data,
    usage_from_body,
    usage_from_sse,
    usage_only,
)
from llm_operator.gateway.tracing import TRACE
from llm_operator.gateway.upstreams import NativeApi
from llm_operator.gateway.upstreams.shapes import error_body as openai_error_body

log = logging.getLogger("llm_operator.gateway")

PASSED_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms",
                  "retry-after")
USAGE_TAIL_BYTES = 16384
CLIENT_CLOSED = 499  # nginx's status for a client that closed the request (metrics only)


ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


class AnswerFailed(Exception):
    """The upstream failed after it began to answer, before the client received a byte.

    Nothing has reached the client, so the request may still go to another replica.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def as_anthropic_error(response: web.Response) -> web.Response:
    """An error answer re-shaped as Anthropic's, status and headers kept."""
    message = f"HTTP {response.status}"
    try:
        decoded = json.loads(response.body) if isinstance(response.body, bytes) else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        error = decoded.get("error")
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
        elif isinstance(error, str):
            message = error
    kind = ANTHROPIC_ERRORS.get(response.status, "api_error")
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in {"content-type", "content-length"}}
    return web.json_response(error_body(kind, message), status=response.status,
                             headers=headers)


class Relaying(RouteTable):
    """Turns an upstream's answer into the client's, counting what it used."""

    def _headers_from(self, upstream: UpstreamResponse) -> dict[str, str]:
        out = {k: v for k in PASSED_HEADERS if (v := upstream.headers.get(k)) is not None}
        out.update({k: v for k, v in upstream.headers.items()
                    if k.lower().startswith("x-ratelimit-")})
        return out

    async def _account(self, state: RouteState, client: Client | None, prompt: int,
                       completion: int, reservation: Reservation, *, batch: bool) -> None:
        if not prompt and not completion:
            return
        reservation.settle(prompt + completion)
        state.metrics.prompt_tokens.inc(prompt)
        state.metrics.completion_tokens.inc(completion)
        usd = 0.0
        if state.route.pricing:
            price = state.route.pricing
            usd = (prompt * price.input_per_million / 1e6
                   + completion * price.output_per_million / 1e6)
            if batch:
                usd *= price.batch_factor
            state.metrics.cost.inc(usd)
        if client is not None and self.gate is not None:
            await self.gate.charge(client, usd, prompt, completion)

    async def _relay(self, request: web.Request, state: RouteState,
                     upstream: UpstreamResponse, *, client: Client | None,
                     reservation: Reservation, extra: dict[str, str],
                     native: NativeApi | None, collect: bool = False) -> web.Response:
        """The upstream's plain answer for the client (``collect``: its stream, assembled).

        AnswerFailed when the upstream fails before its answer is complete: the client has
        received nothing yet, so the caller may send the request elsewhere.
        """
        status = upstream.status
        try:
            if collect:
                status, body = await self._collected(upstream)
            else:
                body = await upstream.read()
        except UpstreamError as exc:  # it began to answer, then failed
            upstream.close()
            log.warning("route %s: upstream %s: %s", state.route.label, extra.get(
                "x-llmop-upstream"), exc)
            raise AnswerFailed(exc.reason) from exc
        if native is not None:
            body = self._from_native(native, upstream.status, body)
        if status == 200:
            await self._account(state, client, *usage_from_body(body), reservation,
                                    batch=request.get(BATCH_RUN, False))
            if request.get(ANTHROPIC):
                try:
                    answer = json.loads(body)
                except ValueError:
                    answer = None
                if isinstance(answer, dict):
                    message = from_openai(answer, state.route.models[0])
                    return web.json_response(message, headers=extra)
        headers = self._headers_from(upstream)
        if collect:  # the stream's content type does not describe the JSON answer
            headers = {k: v for k, v in headers.items() if k != "content-type"}
            headers["content-type"] = "application/json"
        return web.Response(body=body, status=status, headers={**headers, **extra})

    async def _collected(self, upstream: UpstreamResponse) -> tuple[int, bytes]:
        """A streamed answer read to its end and assembled into the plain JSON answer.

        If the client leaves meanwhile, reading is cancelled and the upstream connection cut
        (http1), which stops the generation.
        """
        pending = b""
        data: list[dict[str, Any]] = []
        async for chunk in upstream.chunks():
            events, pending = split_events(pending + chunk)
            data += [d for e in events if (d := sse_data(e)) is not None]
        upstream.release()
        status = 200
        try:
            answer = assemble(data)
        except StreamError as failed:  # an error event: its code, or 500
            answer = failed.body
            code = (answer.get("error") or {}).get("code") if isinstance(
                answer.get("error"), dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 500
        return status, json.dumps(answer, separators=(",", ":")).encode()

    def _from_native(self, native: NativeApi, status: int, body: bytes) -> bytes:
        """A native answer or error in OpenAI's shape (which the rest of the path reads)."""
        try:
            decoded = json.loads(body)
        except ValueError:
            decoded = None
        if status == 200 and isinstance(decoded, dict):
            shaped = native.answer(decoded, int(time.time()))
        elif status == 200:
            shaped = openai_error_body(f"{native.name}: the answer is not a JSON object",
                                       "server_error")
        else:
            shaped = native.error(status, decoded)
        return json.dumps(shaped, separators=(",", ":")).encode()

    async def _opening(self, upstream: UpstreamResponse, label: str, extra: dict[str, str]
                       ) -> AsyncIterator[bytes]:
        """The stream, its first bytes read before anything goes to the client."""
        chunks = upstream.chunks()
        try:
            return _after(await anext(chunks, None), chunks)
        except UpstreamError as exc:  # died before its first byte: the client has nothing
            upstream.close()
            log.warning("route %s: upstream %s: %s before its first byte", label,
                        extra.get("x-llmop-upstream"), exc)
            raise AnswerFailed(exc.reason) from exc
        except BaseException:  # the client left while the upstream had not begun
            upstream.close()
            raise

    def _first_token(self, request: web.Request, state: RouteState, started: float) -> None:
        """A stream's first chunk went to the client: time to first token, a span event."""
        state.metrics.ttft.observe(self._clock() - started)
        if (trace := request.get(TRACE)) is not None:
            trace.event("first token sent")

    async def _relay_stream(self, request: web.Request, state: RouteState,
                            upstream: UpstreamResponse, started: float, *,
                            client: Client | None, reservation: Reservation,
                            hide_usage: bool, extra: dict[str, str],
                            native: NativeApi | None,
                            prepared: web.StreamResponse | None = None) -> web.StreamResponse:
        """Relay as it arrives; with ``hide_usage``, whole events minus the usage-only one.

        A native upstream's events are first translated to OpenAI chunks. Nothing is sent
        before the upstream's first bytes arrive: if it fails before them, AnswerFailed
        (the request may go elsewhere); after them, the stream is cut as the upstream's was.
        """
        label = state.route.label
        out = prepared or Streamed(status=200, headers={**self._headers_from(upstream),
                                                         "Cache-Control": "no-cache", **extra})
        tail = pending = b""
        first = True
        completed = False
        translator = StreamTranslator(state.route.models[0]) if request.get(ANTHROPIC) \
            else None
        adapter = native.stream(int(time.time())) if native is not None else None

        async def relay(chunk: bytes) -> None:
            nonlocal tail, pending
            tail = (tail + chunk)[-USAGE_TAIL_BYTES:]
            send = chunk
            if translator is not None:
                events, pending = split_events(pending + chunk)
                send = b"".join(b"".join(translator.chunk(d)) for e in events
                                if (d := sse_data(e)) is not None)
            elif hide_usage:
                events, pending = split_events(pending + chunk)
                send = b"".join(e for e in events if not usage_only(e))
            if send:
                await out.write(send)

        chunks = await self._opening(upstream, label, extra)
        try:
            if prepared is None:  # a held stream's headers went out with its keepalives
                await out.prepare(request)
            request[STREAM_STARTED] = True
            async for chunk in chunks:
                if first:
                    self._first_token(request, state, started)
                    first = False
                await relay(adapter.feed(chunk) if adapter is not None else chunk)
            if adapter is not None:
                await relay(adapter.close())
            if translator is not None:
                await out.write(b"".join(translator.finish()))
            elif pending:
                await out.write(pending)
            await out.write_eof()
            completed = True
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            log.info("route %s: client went away mid-stream; upstream request cancelled", label)
        finally:
            if completed:
                upstream.release()
            else:
                upstream.close()  # tear the connection down: the upstream stops generating
            state.metrics.request(200 if completed else CLIENT_CLOSED, self._clock() - started)
            if client is not None:
                client.request(200 if completed else CLIENT_CLOSED)
        if completed:
            await self._account(state, client, *usage_from_sse(tail), reservation,
                                    batch=request.get(BATCH_RUN, False))
        return out


async def _after(opening: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stream's first bytes, read ahead, then the rest of it."""
    if opening is not None:
        yield opening
    async for chunk in rest:
        yield chunk


class Streamed(web.StreamResponse):
    """A relayed stream: its metrics are recorded when it ends, not when it starts."""


class HeldEnded(Exception):
    """A held stream that ended with an error event (its model never came, or went)."""

    def __init__(self, stream: HeldStream) -> None:
        super().__init__(stream.outcome)
        self.stream = stream


class HeldStream(Streamed):
    """A stream answered 200 with keepalives while its model had no replica.

    If no answer comes after all, the error goes into the stream as an OpenAI error
    event; ``outcome`` is then the status the metrics count.
    """

    outcome: int | None = None

    async def fail(self, response: web.Response) -> HeldStream:
        body = response.body if isinstance(response.body, bytes) else b"{}"
        await self.write(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        await self.write_eof()
        self.outcome = response.status
        return self
