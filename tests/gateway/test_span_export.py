"""The gateway's span export child: what it is handed reaches the collector, as the SDK sends it.

Records go down a pipe to ``python -m llm_operator.span_export``; these tests drive a
``SpanShipper`` directly against a receiver on loopback: the spans as OpenTelemetry spans
(ids, parents, kinds, events, status), the standard ``OTEL_EXPORTER_OTLP_HEADERS`` on
every export, and a child that died: its traces dropped and counted, nothing raised.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
from collections.abc import AsyncIterator

import pytest
from opentelemetry.trace import SpanKind

from llm_operator.span_export import ERROR, SpanShipper, TraceRecord

from otlp_receiver import Receiver, receiver

T0 = 1_700_000_000_000_000_000


def record(trace_id: int) -> TraceRecord:
    """A request's three spans: the server's (a remote caller's child), two children.

    Kinds are the SDK's values; OTLP numbers them one higher (its 0 is "unspecified").
    """
    return (trace_id, True, "vendor=x", [
        ("POST /v1/chat/completions", 0xA, 0xC0FFEE, SpanKind.SERVER.value, T0, T0 + 9,
         {"url.path": "/x"}, [], None),
        ("llmop.admission", 0xB, 0xA, SpanKind.INTERNAL.value, T0 + 1, T0 + 2,
         {"llmop.route": "ns/m"}, [], None),
        ("llmop.upstream", 0xC, 0xA, SpanKind.CLIENT.value, T0 + 3, T0 + 8, {"llmop.replica": "r0"},
         [("first byte", T0 + 5, {"http.response.status_code": 503})], (ERROR, "503")),
    ])


@pytest.fixture
async def collector() -> AsyncIterator[Receiver]:
    async with receiver() as out:
        yield out


async def test_records_arrive_as_opentelemetry_spans(collector: Receiver) -> None:
    shipper = SpanShipper(collector.url, "front-door", "llm_operator.gateway",
                          flush_seconds=0.01)
    shipper.ship(record(0x1234))
    await collector.until(lambda spans: len(spans) == 3)
    await asyncio.to_thread(shipper.close)
    server, admission, upstream = collector.spans
    trace = f"{0x1234:032x}"
    assert [s.trace_id for s in collector.spans] == [trace] * 3
    assert (server.name, server.span_id, server.parent_id, server.kind) == \
        ("POST /v1/chat/completions", f"{0xA:016x}", f"{0xC0FFEE:016x}", 2)
    assert (admission.parent_id, admission.kind, admission.attributes) == \
        (f"{0xA:016x}", 1, {"llmop.route": "ns/m"})
    assert (upstream.kind, upstream.events, upstream.status_code,
            upstream.status_message) == (3, ["first byte"], 2, "503")
    assert {s.service for s in collector.spans} == {"front-door"}


async def test_the_standard_headers_variable_reaches_every_export(
        collector: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team-a")
    shipper = SpanShipper(collector.url, "gw", "llm_operator.gateway", batch=1)
    shipper.ship(record(1))
    await asyncio.to_thread(shipper.close)  # the child sends what it holds, then ends
    assert len(collector.spans) == 3
    assert [h.get("x-tenant") for h in collector.headers] == ["team-a"]


async def test_a_dead_child_drops_traces_and_says_so_once(
        collector: Receiver, caplog: pytest.LogCaptureFixture) -> None:
    shipper = SpanShipper(collector.url, "gw", "llm_operator.gateway", batch=1)
    shipper.ship(record(1))  # starts the child
    pid = shipper.pid
    assert pid is not None
    await collector.until(lambda spans: len(spans) == 3)
    pidfd = os.pidfd_open(pid)
    os.kill(pid, signal.SIGKILL)
    await asyncio.to_thread(select.select, [pidfd], [], [], 10)  # until it has exited
    os.close(pidfd)
    for trace_id in range(2, 6):
        shipper.ship(record(trace_id))
    await asyncio.to_thread(shipper.close)
    assert len(collector.spans) == 3
    assert shipper.dropped == 4
    said = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert said == ["traces dropped from now on: the export child exited (-9)"]


async def test_a_shipper_that_recorded_nothing_starts_no_child(collector: Receiver) -> None:
    shipper = SpanShipper(collector.url, "gw", "llm_operator.gateway")
    shipper.flush()
    assert shipper.pid is None
    await asyncio.to_thread(shipper.close)
    assert collector.spans == []
