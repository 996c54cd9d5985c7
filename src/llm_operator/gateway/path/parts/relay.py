"""Relay: an upstream's answer to the client, plain or streamed, and the usage it reports.

Native APIs' answers are put in OpenAI's shape, /v1/messages clients get Anthropic's.
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

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.inbound.incoming import prepare
from llm_operator.gateway.path.answers import CLIENT_CLOSED, AnswerFailed
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.providers import NativeApi
from llm_operator.gateway.providers.assembling import StreamError, assemble, finished
from llm_operator.gateway.providers.messages_api import StreamTranslator, from_openai
from llm_operator.gateway.providers.shapes import error_body as openai_error_body
from llm_operator.gateway.providers.sse import (
    Usage,
    data_field,
    split_events,
    sse_data,
    usage_from_body,
    usage_from_sse,
    usage_only,
)
from llm_operator.gateway.routing.routes import Clock, RouteTable
from llm_operator.gateway.upstream.http1 import Response as UpstreamResponse
from llm_operator.gateway.upstream.http1 import UpstreamError

log = logging.getLogger("llm_operator.gateway")

PASSED_HEADERS = ("content-type", "x-request-id", "request-id", "openai-processing-ms",
                  "retry-after")
USAGE_TAIL_BYTES = 16384


def _headers_from(upstream: UpstreamResponse) -> dict[str, str]:
    out = {k: v for k in PASSED_HEADERS if (v := upstream.headers.get(k)) is not None}
    out.update({k: v for k, v in upstream.headers.items()
                if k.lower().startswith("x-ratelimit-")})
    return out


class Relay:
    """Turns an upstream's answer into the client's, counting what it used."""

    def __init__(self, table: RouteTable, clock: Clock) -> None:
        self.table, self._clock = table, clock

    async def _account(self, ex: Exchange, used: Usage) -> None:
        prompt, completion, cached = used
        if not prompt and not completion:
            return
        state = ex.state
        ex.reservation.settle(prompt + completion)
        state.metrics.prompt_tokens.inc(prompt)
        state.metrics.completion_tokens.inc(completion)
        if cached:
            state.metrics.cached_prompt_tokens.inc(cached)
        usd = 0.0
        if state.route.pricing:
            price = state.route.pricing
            usd = (prompt * price.input_per_million / 1e6
                   + completion * price.output_per_million / 1e6)
            if ex.batch_run:
                usd *= price.batch_factor
            state.metrics.cost.inc(usd)
        gate = self.table.gate
        if ex.client is not None and gate is not None:
            await gate.charge(ex.client, usd, prompt, completion)

    async def plain(self, ex: Exchange, upstream: UpstreamResponse, extra: dict[str, str],
                    native: NativeApi | None, *, collect: bool = False
                    ) -> web.StreamResponse:
        """The upstream's plain answer for the client (``collect``: its stream, assembled).

        AnswerFailed when the upstream fails before its answer is complete: the client has
        received nothing yet, so the caller may send the request elsewhere.
        """
        status = upstream.status
        try:
            if collect:
                status, body = await _collected(upstream)
            else:
                body = await upstream.read()
        except UpstreamError as exc:  # it began to answer, then failed
            upstream.close()
            log.warning("route %s: upstream %s: %s", ex.state.route.label, extra.get(
                "x-llmop-upstream"), exc)
            raise AnswerFailed(exc.reason) from exc
        if native is not None:
            body = _from_native(native, upstream.status, body)
        if status == 200:
            await self._account(ex, usage_from_body(body))
        if ex.answer_guard is not None and (status == 200 or body.strip()):
            # an error's body is read too: it may quote what the model said
            checked = await ex.answer_guard(body)
            if isinstance(checked, web.Response):  # a guard blocked it, or could not read it
                if status != 200 and checked.status == 502:
                    return error_response(status, f"the model's server answered HTTP "
                                          f"{status}; its body is not shown: the model's "
                                          "output guards could not read it", "server_error",
                                          "upstream_error")
                return checked
            body = checked
        if status == 200 and ex.anthropic:
            try:
                answer = json.loads(body)
            except ValueError:
                answer = None
            if isinstance(answer, dict):
                message = from_openai(answer, ex.state.route.models[0])
                return web.json_response(message, headers=extra)
        headers = _headers_from(upstream)
        if collect:  # the stream's content type does not describe the JSON answer
            headers = {k: v for k, v in headers.items() if k != "content-type"}
            headers["content-type"] = "application/json"
        return web.Response(body=body, status=status, headers={**headers, **extra})

    def _stream_ended(self, ex: Exchange, completed: bool) -> None:
        """A stream counts itself as it ends: 200, or the client closed it."""
        status = 200 if completed else CLIENT_CLOSED
        ex.state.metrics.request(status, self._clock() - ex.started)
        if ex.client is not None:
            ex.client.request(status)

    def _first_token(self, ex: Exchange) -> None:
        """A stream's first chunk went to the client: time to first token, a span event."""
        ex.state.metrics.ttft.observe(self._clock() - ex.started)
        if ex.trace is not None:
            ex.trace.event("first token sent")

    async def stream(self, ex: Exchange, upstream: UpstreamResponse, extra: dict[str, str],
                     native: NativeApi | None) -> web.StreamResponse:
        """Relay as it arrives; with ``hide_usage``, whole events minus the usage-only one.

        A native upstream's events are first translated to OpenAI chunks. Nothing is sent
        before the upstream's first bytes arrive: if it fails before them, AnswerFailed
        (the request may go elsewhere); after them, the stream is cut as the upstream's was.
        """
        state, hide_usage, prepared = ex.state, ex.hide_usage, ex.held
        label = state.route.label
        out = prepared or web.StreamResponse(status=200, headers={
            **_headers_from(upstream), "Cache-Control": "no-cache", **extra})
        first, completed = True, False
        events = _Events(StreamTranslator(state.route.models[0]) if ex.anthropic else None,
                         hide_usage=hide_usage)
        adapter = native.stream(int(time.time())) if native is not None else None
        guard = ex.stream_guard  # output guards: the text held back and checked as it comes

        async def relay(chunk: bytes) -> None:
            send = events.feed(chunk)
            if guard is not None and send:
                send = await guard.feed(send)
            if send:
                await out.write(send)

        chunks = await _opening(upstream, label, extra)  # AnswerFailed: Forward goes on
        ex.counted_elsewhere = True  # from here the stream counts itself as it ends
        try:
            if prepared is None:  # a held stream's headers went out with its keepalives
                await prepare(out, ex.request)
            ex.headers_sent = True
            async for chunk in chunks:
                if first:
                    self._first_token(ex)
                    first = False
                await relay(adapter.feed(chunk) if adapter is not None else chunk)
                if guard is not None and guard.stopped:
                    break  # a guard blocked the answer: its error event went out
            if guard is None or not guard.stopped:
                if adapter is not None:
                    await relay(adapter.close())
                rest = events.finish()
                if guard is not None:
                    rest = await guard.feed(rest) + await guard.finish()
                if rest:
                    await out.write(rest)
            await out.write_eof()
            completed = True
        except ConnectionResetError:  # aiohttp's ClientConnectionResetError is one
            log.info("route %s: client went away mid-stream; upstream request cancelled", label)
        finally:
            if completed and (guard is None or not guard.stopped):
                upstream.release()
            else:
                upstream.close()  # tear the connection down: the upstream stops generating
            self._stream_ended(ex, completed)
        if completed:
            await self._account(ex, usage_from_sse(events.tail))
        return out


class _Events:
    """A stream's chunks as the client gets them; the tail kept for its usage.

    Translated to Anthropic's events, or whole events less the usage-only one, or as
    they came.
    """

    def __init__(self, translator: StreamTranslator | None, *, hide_usage: bool) -> None:
        self.translator, self.hide_usage = translator, hide_usage
        self.tail = self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        self.tail = (self.tail + chunk)[-USAGE_TAIL_BYTES:]
        if self.translator is not None:
            events, self.pending = split_events(self.pending + chunk)
            return b"".join(b"".join(self.translator.chunk(d)) for e in events
                            if (d := sse_data(e)) is not None)
        if self.hide_usage:
            events, self.pending = split_events(self.pending + chunk)
            return b"".join(e for e in events if not usage_only(e))
        return chunk

    def finish(self) -> bytes:
        """What is left to send once the upstream's stream ended."""
        if self.translator is not None:
            return b"".join(self.translator.finish())
        return self.pending


async def _collected(upstream: UpstreamResponse) -> tuple[int, bytes]:
    """A streamed answer read to its end and assembled into the plain JSON answer.

    If the client leaves meanwhile, reading is cancelled and the upstream connection cut
    (http1), which stops the generation.
    """
    pending = b""
    data: list[dict[str, Any]] = []
    done = False

    def read(events: list[bytes]) -> None:
        nonlocal done
        for event in events:
            if (d := sse_data(event)) is not None:
                data.append(d)
            elif (field := data_field(event)) is not None and field.strip() == b"[DONE]":
                done = True

    async for chunk in upstream.chunks():
        events, pending = split_events(pending + chunk)
        read(events)
    read([pending] if pending.strip() else [])  # a last event without its blank line
    upstream.release()
    status = 200
    try:
        answer = assemble(data)
    except StreamError as failed:  # an error event: its code, or 500
        answer = failed.body
        code = (answer.get("error") or {}).get("code") if isinstance(
            answer.get("error"), dict) else None
        status = code if isinstance(code, int) and 400 <= code < 600 else 500
    else:
        if not done and not finished(answer):
            # the engine's process went mid-answer (a pool member unloaded under it) and
            # its server closed the stream cleanly: half an answer is not an answer
            raise IncompleteAnswer("the stream ended before its [DONE] or a finish_reason")
    return status, json.dumps(answer, separators=(",", ":")).encode()


class IncompleteAnswer(UpstreamError):
    """A streamed answer that ended, cleanly, before it was complete."""

    reason = "incomplete"


def _from_native(native: NativeApi, status: int, body: bytes) -> bytes:
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


async def _opening(upstream: UpstreamResponse, label: str, extra: dict[str, str]
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


async def _after(opening: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A stream's first bytes, read ahead, then the rest of it."""
    if opening is not None:
        yield opening
    async for chunk in rest:
        yield chunk
