"""Status metrics PromQL: which models have them, and what exactly is asked."""

from __future__ import annotations

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.reconcile.queries import status_queries

from samples import sample_doc


def model(stem: str):  # type: ignore[no-untyped-def]
    return parse_llmmodel(sample_doc(stem))


def test_vllm_model_queries_its_own_pods() -> None:
    queries = status_queries(model("gemma4-31b-nvidia"))
    assert queries is not None
    selector = ('namespace="ai-models",'
                'pod=~"gemma4-31b-nvidia-([a-z0-9]+-[a-z0-9]+|[0-9]+)"')
    count = f"sum(rate(vllm:e2e_request_latency_seconds_count{{{selector}}}[5m]))"
    assert queries.requests_per_minute == f"{count} * 60"
    assert queries.average_latency_ms == (
        f"1000 * sum(rate(vllm:e2e_request_latency_seconds_sum{{{selector}}}[5m])) / {count}")


def test_remote_model_queries_its_gateway() -> None:
    queries = status_queries(model("gpt55-remote"))
    assert queries is not None and "llmop_gateway_request_duration_seconds_count" in \
        queries.requests_per_minute


@pytest.mark.parametrize("stem", ["qwen35-9b-cpu"])
def test_engines_without_a_latency_histogram_have_no_queries(stem: str) -> None:
    assert status_queries(model(stem)) is None
