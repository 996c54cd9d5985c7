"""What the gateway reads of an engine's queue from its /metrics: picking, engine queues."""

from __future__ import annotations

import pytest

from llm_operator.gateway.flow.engine_metrics import engine_report
from llm_operator.gateway.flow.saturation import EngineReport

VLLM = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 3.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 5.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
"""
VLLM_OLD_KV = """\
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="m"} 0.5
"""
# as llama-server b8000-series prints it (its own /metrics with --metrics)
LLAMA_SERVER = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 120
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 4
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""


# a model pool's own gateway answers its pool's /metrics: none of its engines' figures
POOL_GATEWAY = """\
# TYPE llmop_gateway_requests_total counter
llmop_gateway_requests_total{route="m",status="200"} 7.0
# TYPE llmop_gateway_engine_wake_waiting gauge
llmop_gateway_engine_wake_waiting{group="pool p",upstream="u"} 1.0
"""


@pytest.mark.parametrize(("text", "numbers"), [
    (VLLM, (3.0, 5.0, 0.25)),
    (VLLM_OLD_KV, (0.0, 0.0, 0.5)),
    (LLAMA_SERVER, (2.0, 4.0, 0.0)),
    ("", None),
    (POOL_GATEWAY, None),
], ids=["vllm", "vllm-older-kv-name", "llama-server", "nothing", "a pool's gateway"])
def test_waiting_running_and_kv_usage_of_each_engine(
        text: str, numbers: tuple[float, float, float] | None) -> None:
    """None: nothing known of its engines, as of one without metrics (not an idle one)."""
    assert engine_report(text) == (None if numbers is None else EngineReport(*numbers))
