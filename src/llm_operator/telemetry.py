"""OpenTelemetry trace export for one process: its tracer, from settings and OTEL_* variables.

Each process builds its own provider (never the global one): a test runs several gateways
side by side, each exporting to its own receiver. Spans are batched and sent over OTLP/HTTP
(protobuf) from a background thread, off the request path.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

from llm_operator.profiles.tracing import Tracing, export_endpoint

SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
BATCH_SIZE_ENV = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
EXPORT_BATCH = 64


def tracer_provider(settings: Tracing | None, component: str,
                    env: Mapping[str, str] | None = None) -> TracerProvider | None:
    """A provider exporting to the configured collector, or None when tracing is off.

    The sampler is ``sampleRatio`` of new traces (parents' decisions kept) when set, else
    what OTEL_TRACES_SAMPLER says (the SDK reads it), else every trace.
    """
    env = os.environ if env is None else env
    endpoint = export_endpoint(settings, env)
    if endpoint is None:
        return None
    settings = settings or Tracing()
    name = settings.service_name or env.get(SERVICE_NAME_ENV) or f"llmop-{component}"
    sampler = None if settings.sample_ratio is None else \
        ParentBased(TraceIdRatioBased(settings.sample_ratio))
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}),
                              sampler=sampler)
    # Small batches: the exporter's thread encodes a batch holding the interpreter, so a
    # 512-span batch (the SDK's default) stalls requests for tens of milliseconds (p99);
    # OTEL_BSP_MAX_EXPORT_BATCH_SIZE still decides where it is set.
    batch = None if env.get(BATCH_SIZE_ENV) else EXPORT_BATCH
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint),
                                                   max_export_batch_size=batch))
    return provider
