"""An OTLP/HTTP trace receiver on loopback, decoding with OpenTelemetry's own protobufs.

No collector installs here (Debian has none, PyPI's are libraries), so the tests receive
what the exporters send themselves: ``POST /v1/traces`` with an ExportTraceServiceRequest,
decoded by ``opentelemetry-proto``, answered as a collector answers.
"""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass
class ReceivedSpan:
    """One span as the collector got it: ids in hex, attributes and events decoded."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    service: str
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    status_code: int = 0  # 0 unset, 1 ok, 2 error
    status_message: str = ""


class Receiver:
    """Spans received, and the URL exporters send them to."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.headers: list[dict[str, str]] = []  # each export request's
        self.url = ""
        self.changed = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.headers.append(dict(request.headers))
        if request.headers.get("Content-Encoding") == "gzip":
            raw = gzip.decompress(raw)
        export = ExportTraceServiceRequest.FromString(raw)
        for resource in export.resource_spans:
            service = next((_value(a.value) for a in resource.resource.attributes
                            if a.key == "service.name"), "")
            for scope in resource.scope_spans:
                for span in scope.spans:
                    self.spans.append(ReceivedSpan(
                        span.name, span.trace_id.hex(), span.span_id.hex(),
                        span.parent_span_id.hex(), span.kind, service,
                        {a.key: _value(a.value) for a in span.attributes},
                        [e.name for e in span.events], span.status.code,
                        span.status.message))
        self.changed.set()
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(),
                            content_type="application/x-protobuf")

    def named(self, name: str) -> list[ReceivedSpan]:
        return [s for s in self.spans if s.name == name]

    async def until(self, check: Callable[[list[ReceivedSpan]], bool],
                    timeout: float = 10) -> None:
        """Until the spans received pass ``check`` (exports arrive in batches)."""
        async with asyncio.timeout(timeout):
            while not check(self.spans):
                self.changed.clear()
                await self.changed.wait()


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    out = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", out.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    out.url = f"http://127.0.0.1:{server.port}/v1/traces"
    try:
        yield out
    finally:
        await server.close()
