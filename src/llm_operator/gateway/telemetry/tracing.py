"""A request's spans through the gateway: the request, admission, queue wait, each attempt.

The incoming W3C ``traceparent`` is continued (or a trace started); each upstream attempt
passes its own context on, so an engine that exports spans (vLLM with
``--otlp-traces-endpoint``) adds its own under it. Whether a trace is recorded is the
OpenTelemetry SDK's sampler's decision (``sampleRatio``, ``OTEL_TRACES_SAMPLER``).

A recorded request's spans are plain records (a few microseconds each), handed at its end
to a ``SpanShipper``: the SDK's spans, their encoding and their HTTP cost ~200 µs per
request in this process, so they are built and sent by a child process instead
(``llm_operator.span_export``). An unsampled request records nothing and starts no
children.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler
from opentelemetry.trace import SpanKind, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from llm_operator.span_export import ERROR, SpanRecord, SpanShipper, TraceRecord

Attributes = Mapping[str, str | int | float | bool]
_EMPTY = Context()
_RECORDED = (Decision.RECORD_AND_SAMPLE,)  # RECORD_ONLY spans are never exported


class Span:
    """One recorded span: what the export child turns into an OpenTelemetry span."""

    __slots__ = ("attributes", "end", "events", "kind", "name", "parent_id", "span_id",
                 "start", "status")

    def __init__(self, name: str, parent_id: int, kind: SpanKind,
                 attributes: Attributes | None) -> None:
        self.name, self.parent_id, self.kind = name, parent_id, kind
        self.span_id = random.getrandbits(64) or 1
        self.attributes: dict[str, Any] = dict(attributes) if attributes else {}
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.status: tuple[int, str] | None = None
        self.start, self.end = time.time_ns(), 0

    def fail(self, why: str) -> None:
        self.status = (ERROR, why)

    def record(self) -> SpanRecord:
        return (self.name, self.span_id, self.parent_id, self.kind.value, self.start,
                self.end, self.attributes, self.events, self.status)


class Traces:
    """The gateway's sampler, the W3C trace-context propagator and the span shipper."""

    def __init__(self, sampler: Sampler, shipper: SpanShipper) -> None:
        self.sampler, self.shipper = sampler, shipper
        self.propagator = TraceContextTextMapPropagator()

    def begin(self, method: str, path: str, headers: Mapping[str, str]) -> RequestTrace:
        """A request's server span, the caller's trace continued when it sent one."""
        parent = self.propagator.extract(headers) if "traceparent" in headers else _EMPTY
        caller = get_current_span(parent).get_span_context()
        trace_id = caller.trace_id if caller.is_valid else random.getrandbits(128) or 1
        name = f"{method} {path}"
        decision = self.sampler.should_sample(parent, trace_id, name, SpanKind.SERVER)
        sampled = decision.decision in _RECORDED
        span = Span(name, caller.span_id if caller.is_valid else 0, SpanKind.SERVER,
                    {"http.request.method": method, "url.path": path} if sampled else None)
        state = caller.trace_state.to_header() if caller.is_valid else ""
        return RequestTrace(self, trace_id, span, sampled=sampled,
                            remote=caller.is_valid and caller.is_remote, trace_state=state)

    async def close(self) -> None:
        """Send what is recorded and stop the export child."""
        self.shipper.flush()  # here, in the loop that ships
        await asyncio.to_thread(self.shipper.close)


class RequestTrace:
    """One request's spans: its server span and the innermost one open (``current``).

    A request's parts run one after another, so the innermost open span is where an
    attribute, an event or an upstream's ``traceparent`` belongs.
    """

    __slots__ = ("current", "recording", "remote", "request", "spans", "trace_id",
                 "trace_state", "traces")

    def __init__(self, traces: Traces, trace_id: int, request: Span, *, sampled: bool,
                 remote: bool, trace_state: str) -> None:
        self.traces, self.trace_id, self.request = traces, trace_id, request
        self.current, self.recording, self.remote = request, sampled, remote
        self.trace_state = trace_state
        self.spans: list[Span] = [request]

    @contextmanager
    def span(self, name: str, attributes: Attributes | None = None,
             kind: SpanKind = SpanKind.INTERNAL) -> Iterator[Span | None]:
        """A child of the current span (None when the request is not sampled).

        An exception ends it as an error, named by its type.
        """
        if not self.recording:
            yield None
            return
        parent = self.current
        span = Span(name, parent.span_id, kind, attributes)
        self.spans.append(span)
        self.current = span
        try:
            yield span
        except BaseException as exc:
            span.fail(str(getattr(exc, "code", None) or type(exc).__name__))
            raise
        finally:
            self.current = parent
            span.end = time.time_ns()

    def note(self, **attributes: Any) -> None:
        """Attributes on the current span."""
        if self.recording:
            self.current.attributes.update(attributes)

    def event(self, name: str, **attributes: Any) -> None:
        if self.recording:
            self.current.events.append((name, time.time_ns(), attributes))

    def inject(self, headers: dict[str, str]) -> None:
        """Add the current span's ``traceparent`` (and the caller's ``tracestate``)."""
        headers["traceparent"] = (f"00-{self.trace_id:032x}-{self.current.span_id:016x}-"
                                  f"{'01' if self.recording else '00'}")
        if self.trace_state:
            headers["tracestate"] = self.trace_state

    @staticmethod
    def failed(span: Span | None, why: str) -> None:
        if span is not None:
            span.fail(why)

    def end(self, status: int | None, error: str | None = None) -> None:
        """End the request's span with the client's status (None: no answer, ``error``)."""
        if not self.recording:
            return
        span = self.request
        if status is not None:
            span.attributes["http.response.status_code"] = status
        if error is not None or (status is not None and status >= 500):
            span.fail(error or f"HTTP {status}")
        span.end = time.time_ns()
        for open_span in self.spans:  # one its part left open ends with the request
            open_span.end = open_span.end or span.end
        record: TraceRecord = (self.trace_id, self.remote, self.trace_state,
                               [s.record() for s in self.spans])
        self.traces.shipper.ship(record)


TRACE = web.RequestKey("trace", RequestTrace)  # the request's spans, when tracing is on
