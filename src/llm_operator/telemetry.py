"""Where a process's traces go and the operator's tracer, from settings and OTEL_* variables.

Each process builds its own (never the global provider): a test runs several gateways side
by side, each exporting to its own receiver. The operator's spans are batched and sent
over OTLP/HTTP (protobuf) from a background thread; the gateway's, many per second, go
through ``span_export``'s child process instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased

from llm_operator.profiles.tracing import Tracing, export_endpoint

SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
BATCH_SIZE_ENV = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
EXPORT_BATCH = 64


@dataclass(frozen=True)
class TraceTarget:
    """Where a process's traces go, under which service name, and which it records."""

    endpoint: str
    service: str
    sampler: Sampler


def trace_target(settings: Tracing | None, component: str,
                 env: Mapping[str, str] | None = None) -> TraceTarget | None:
    """The collector, service name and sampler, or None when tracing is off.

    The sampler is ``sampleRatio`` of new traces (parents' decisions kept) when set, else
    what OTEL_TRACES_SAMPLER says (the SDK reads it), else every trace.
    """
    env = os.environ if env is None else env
    endpoint = export_endpoint(settings, env)
    if endpoint is None:
        return None
    settings = settings or Tracing()
    name = settings.service_name or env.get(SERVICE_NAME_ENV) or f"llmop-{component}"
    sampler = TracerProvider(shutdown_on_exit=False).sampler \
        if settings.sample_ratio is None else \
        ParentBased(TraceIdRatioBased(settings.sample_ratio))
    return TraceTarget(endpoint, name, sampler)


def tracer_provider(settings: Tracing | None, component: str,
                    env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """A provider exporting to the configured collector from a thread (the operator's)."""
    env = os.environ if env is None else env
    target = trace_target(settings, component, env)
    if target is None:
        return None
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: target.service}),
                              sampler=target.sampler)
    # Small batches: the exporter's thread encodes a batch holding the interpreter, so a
    # 512-span batch (the SDK's default) stalls the process for tens of milliseconds;
    # OTEL_BSP_MAX_EXPORT_BATCH_SIZE still decides where it is set.
    batch = None if env.get(BATCH_SIZE_ENV) else EXPORT_BATCH
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=target.endpoint), max_export_batch_size=batch))
    return provider
