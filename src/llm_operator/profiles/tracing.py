"""Trace export settings shared by the operator, the router and the gateway (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
DISABLED_ENV = "OTEL_SDK_DISABLED"
DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"  # the OTLP/HTTP default


class Tracing(BaseModel):
    """OpenTelemetry traces, exported over OTLP/HTTP (docs/tracing.md). Off by default."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True,
                              extra="forbid", frozen=True)

    enabled: bool | None = Field(
        None, description="Export traces. Unset: on when an endpoint is set here or in "
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, as in every "
        "OpenTelemetry SDK; OTEL_SDK_DISABLED=true turns it off whatever is set.")
    endpoint: str | None = Field(
        None, pattern=r"^https?://\S+$", description="The collector's OTLP/HTTP traces URL, "
        "e.g. http://otel-collector.observability:4318/v1/traces. Unset: the OTEL_* "
        "variables, else http://localhost:4318/v1/traces.")
    sample_ratio: float | None = Field(
        None, ge=0, le=1, description="Share of new traces recorded; a request whose "
        "traceparent says sampled is always recorded. Unset: OTEL_TRACES_SAMPLER and "
        "OTEL_TRACES_SAMPLER_ARG, else every trace.")
    service_name: str | None = Field(
        None, min_length=1, max_length=128, description="service.name of the spans. "
        "Unset: OTEL_SERVICE_NAME, else llmop-<component> (operator, router, gateway).")


def export_endpoint(settings: Tracing | None, env: Mapping[str, str]) -> str | None:
    """Where traces go, or None when they are off (settings first, then OTEL_* variables)."""
    if env.get(DISABLED_ENV, "").strip().lower() == "true":
        return None
    settings = settings or Tracing()
    endpoint = settings.endpoint or env.get(TRACES_ENDPOINT_ENV, "").strip() or None
    if endpoint is None and (base := env.get(ENDPOINT_ENV, "").strip()):
        endpoint = base.rstrip("/") + "/v1/traces"  # the spec's signal path on the base
    enabled = settings.enabled if settings.enabled is not None else endpoint is not None
    if not enabled:
        return None
    return endpoint or DEFAULT_ENDPOINT
