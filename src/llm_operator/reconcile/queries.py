"""PromQL for the status fields requestsPerMinute and averageLatencyMs (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.render.scaling import pod_selector

# The request-latency histogram each serving path exports; llama.cpp and Ollama export none
# (their status fields stay unset).
LATENCY_HISTOGRAM = {
    "vllm": "vllm:e2e_request_latency_seconds",
    "sglang": "sglang:e2e_request_latency_seconds",
    "gateway": "llmop_gateway_request_duration_seconds",
}
WINDOW = "5m"


@dataclass(frozen=True)
class StatusQueries:
    requests_per_minute: str
    average_latency_ms: str


def status_queries(model: LLMModel) -> StatusQueries | None:
    """Queries over the last five minutes of the model's own pods, or None if it has none."""
    source = "gateway" if model.spec.is_remote else model.spec.inference_engine
    histogram = LATENCY_HISTOGRAM.get(source)
    if histogram is None:
        return None
    selector = pod_selector(model)
    count = f"sum(rate({histogram}_count{{{selector}}}[{WINDOW}]))"
    total = f"sum(rate({histogram}_sum{{{selector}}}[{WINDOW}]))"
    return StatusQueries(requests_per_minute=f"{count} * 60",
                         average_latency_ms=f"1000 * {total} / {count}")
