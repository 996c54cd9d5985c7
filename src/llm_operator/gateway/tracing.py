"""A request's spans through the gateway: the request, admission, queue wait, each attempt.

The incoming W3C ``traceparent`` is continued (or a trace started); each upstream attempt
passes its own context on, so an engine that exports spans (vLLM with
``--otlp-traces-endpoint``) adds its own under it. Spans are started with explicit parents
(no context variables to attach and detach) and a request the sampler leaves out creates
no child spans at all: tracing a request costs what its spans cost, and an unsampled one
a few microseconds (bench/tracing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aiohttp import web
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

Attributes = Mapping[str, str | int | float | bool]


class Traces:
    """The gateway's tracer and the W3C trace-context propagator."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("llm_operator.gateway")
        self.propagator = TraceContextTextMapPropagator()

    def begin(self, method: str, path: str, headers: Mapping[str, str]) -> RequestTrace:
        """A request's server span, the caller's trace continued when it sent one."""
        parent = self.propagator.extract(headers)
        span = self.tracer.start_span(f"{method} {path}", context=parent,
                                      kind=SpanKind.SERVER,
                                      attributes={"http.request.method": method,
                                                  "url.path": path})
        return RequestTrace(self, span)

    async def close(self) -> None:
        """Export what is batched and stop (the exporter's HTTP runs in a thread)."""
        await asyncio.to_thread(self.provider.shutdown)


class RequestTrace:
    """One request's spans: its server span and the innermost one open (``current``).

    A request's parts run one after another, so the innermost open span is where an
    attribute, an event or an upstream's ``traceparent`` belongs.
    """

    __slots__ = ("current", "recording", "request", "traces")

    def __init__(self, traces: Traces, request: Span) -> None:
        self.traces, self.request, self.current = traces, request, request
        self.recording = request.is_recording()

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
        span = self.traces.tracer.start_span(name, context=set_span_in_context(parent),
                                             kind=kind, attributes=attributes)
        self.current = span
        try:
            yield span
        except BaseException as exc:
            span.set_status(Status(StatusCode.ERROR, getattr(exc, "code", None)
                                   or type(exc).__name__))
            raise
        finally:
            self.current = parent
            span.end()

    def note(self, **attributes: Any) -> None:
        """Attributes on the current span."""
        if self.recording:
            self.current.set_attributes(attributes)

    def event(self, name: str, **attributes: Any) -> None:
        if self.recording:
            self.current.add_event(name, attributes)

    def inject(self, headers: dict[str, str]) -> None:
        """Add the current span's ``traceparent`` to an upstream request's headers."""
        self.traces.propagator.inject(headers, context=set_span_in_context(self.current))

    @staticmethod
    def failed(span: Span | None, why: str) -> None:
        if span is not None:
            span.set_status(Status(StatusCode.ERROR, why))

    def end(self, status: int | None, error: str | None = None) -> None:
        """End the request's span with the client's status (None: no answer, ``error``)."""
        if self.recording:
            if status is not None:
                self.request.set_attribute("http.response.status_code", status)
            if error is not None or (status is not None and status >= 500):
                self.request.set_status(Status(StatusCode.ERROR, error or f"HTTP {status}"))
        self.request.end()


TRACE = web.RequestKey("trace", RequestTrace)  # the request's spans, when tracing is on
