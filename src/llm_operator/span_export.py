"""Span export in a child process: a busy process hands it records, it sends OTLP/HTTP.

Creating, encoding and posting OpenTelemetry SDK spans costs a traced request ~200 µs of
the interpreter it shares with every other request (bench/tracing). The gateway instead
records plain tuples, and a ``SpanShipper`` pickles them in batches down a pipe to
``python -m llm_operator.span_export``, which builds the SDK's spans and exports them with
the SDK's own OTLP/HTTP exporter (so ``OTEL_EXPORTER_OTLP_HEADERS``, compression,
timeouts and retries behave as in any OpenTelemetry SDK). The child ends when the pipe
closes, after sending what it holds; if it dies, traces are dropped and said so once, and
the requests go on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
import queue
import signal
import subprocess
import sys
import threading
from contextlib import suppress
from typing import IO, Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

log = logging.getLogger(__name__)

# One span: name, span id, parent span id (0: none), kind (SpanKind's value), start and
# end (ns since the epoch), attributes, events (name, ns, attributes), status (code, why).
SpanRecord = tuple[str, int, int, int, int, int, dict[str, Any],
                   list[tuple[str, int, dict[str, Any]]], tuple[int, str] | None]
# One trace's spans from one request: trace id, whether the first span's parent is the
# caller's (remote), the caller's tracestate header, the spans (the request's first).
TraceRecord = tuple[int, bool, str, list[SpanRecord]]
ERROR = StatusCode.ERROR.value
EXPORT_BATCH = 512  # spans per OTLP request from the child (it holds no one's interpreter)
MAX_BEHIND = 64  # batches waiting for the pipe before new ones are dropped


class SpanShipper:
    """The parent's side: batches of trace records, pickled to the export child.

    ``ship`` runs in the event loop and only appends; a batch leaves when it is full or
    ``flush_seconds`` after its first record, through a thread that writes the pipe.
    """

    def __init__(self, endpoint: str, service: str, scope: str, *,
                 flush_seconds: float = 0.2, batch: int = 256) -> None:
        self._flush_seconds, self._batch = flush_seconds, batch
        self._pending: list[TraceRecord] = []
        self._timer: asyncio.TimerHandle | None = None
        self._out: queue.SimpleQueue[list[TraceRecord] | None] = queue.SimpleQueue()
        self._broken = False  # the pipe broke: nothing more is written
        self.dropped = 0  # traces not sent: the child gone or too far behind
        self._config = json.dumps({"endpoint": endpoint, "service": service, "scope": scope})
        self._child: subprocess.Popen[bytes] | None = None  # started by the first batch
        self._thread = threading.Thread(target=self._send, name="span-export", daemon=True)

    @property
    def pid(self) -> int | None:
        """The export child's process ID, once a batch started it."""
        return None if self._child is None else self._child.pid

    def ship(self, record: TraceRecord) -> None:
        """Queue one request's spans (in the event loop: an append)."""
        self._pending.append(record)
        if len(self._pending) >= self._batch:
            self.flush()
        elif self._timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
            else:
                self._timer = loop.call_later(self._flush_seconds, self.flush)

    def flush(self) -> None:
        """Hand what is pending to the writing thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        if self._child is None:
            self._child = subprocess.Popen([sys.executable, "-m", __name__, self._config],
                                           stdin=subprocess.PIPE)
            self._thread.start()
        if self._out.qsize() >= MAX_BEHIND:
            self._drop(len(batch), "the export child is behind")
        else:
            self._out.put(batch)

    def close(self, timeout: float = 10) -> None:
        """Send what is queued, close the pipe and wait for the child to export it."""
        self.flush()
        if self._child is None:
            return  # nothing was ever recorded
        self._out.put(None)
        self._thread.join(timeout)
        try:
            self._child.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("span export child did not finish in %.0f s: stopped", timeout)
            self._child.kill()
            self._child.wait()

    def _send(self) -> None:
        assert self._child is not None and self._child.stdin is not None
        child, pipe = self._child, self._child.stdin
        while (batch := self._out.get()) is not None:
            if self._broken:
                self._drop(len(batch), "the export child exited")
                continue
            try:
                pickle.dump(batch, pipe, protocol=pickle.HIGHEST_PROTOCOL)
                pipe.flush()
            except (OSError, ValueError):
                self._broken = True
                self._drop(len(batch), f"the export child exited ({child.poll()})")
        with suppress(OSError):  # the child is gone: nothing to close it for
            pipe.close()

    def _drop(self, traces: int, why: str) -> None:
        if self.dropped == 0:
            log.warning("traces dropped from now on: %s", why)
        self.dropped += traces


def _spans(record: TraceRecord, resource: Resource, scope: InstrumentationScope
           ) -> list[ReadableSpan]:
    """One request's records as the SDK's spans."""
    trace_id, remote, state, spans = record
    trace_state = TraceState.from_header([state]) if state else None
    flags = TraceFlags(TraceFlags.SAMPLED)
    out: list[ReadableSpan] = []
    for index, (name, span_id, parent_id, kind, start, end, attributes, events,
                status) in enumerate(spans):
        parent = SpanContext(trace_id, parent_id, is_remote=remote and index == 0,
                             trace_flags=flags, trace_state=trace_state) \
            if parent_id else None
        out.append(ReadableSpan(
            name, SpanContext(trace_id, span_id, is_remote=False, trace_flags=flags,
                              trace_state=trace_state),
            parent, resource, attributes,
            [Event(event, attrs, at) for event, at, attrs in events], kind=SpanKind(kind),
            status=Status(StatusCode(status[0]), status[1]) if status else Status(),
            start_time=start, end_time=end, instrumentation_scope=scope))
    return out


def main(argv: list[str], source: IO[bytes]) -> int:
    """The child: trace records from ``source`` until it closes, exported as they come."""
    config = json.loads(argv[1])
    exporter = OTLPSpanExporter(endpoint=config["endpoint"])
    resource = Resource.create({SERVICE_NAME: config["service"]})
    scope = InstrumentationScope(config["scope"])
    while True:
        try:
            batch: list[TraceRecord] = pickle.load(source)
        except EOFError:
            break
        spans = [span for record in batch for span in _spans(record, resource, scope)]
        for start in range(0, len(spans), EXPORT_BATCH):
            exporter.export(spans[start:start + EXPORT_BATCH])
    exporter.shutdown()  # type: ignore[no-untyped-call]  # the SDK's own, untyped
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the parent; EOF stops this
    logging.basicConfig(level=logging.WARNING, format="span export: %(message)s")
    sys.exit(main(sys.argv, sys.stdin.buffer))
