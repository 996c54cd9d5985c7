"""What an engine's Prometheus exposition says of its load: waiting, running, KV cache use."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from llm_operator.gateway.flow.saturation import EngineReport

# What vLLM, SGLang and llama-server export of their queues (vLLM's KV cache under its older
# name too), summed per pod.
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred")
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs",
           "llamacpp:requests_processing")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")


def engine_report(text: str) -> EngineReport | None:
    """(waiting, running, KV cache usage 0..1) from an engine's /metrics text.

    None where the text holds none of an engine's queue figures: not an engine's (a pool's
    own gateway answers there, whose idle figures are not its engines'), so nothing is
    known, as of an engine without metrics. ValueError when the text is not Prometheus'
    exposition format.
    """
    waiting = running = kv = 0.0
    found = False
    for family in text_string_to_metric_families(text):
        total = sum(s.value for s in family.samples if s.name == family.name)
        if family.name in WAITING:
            waiting, found = total, True
        elif family.name in RUNNING:
            running, found = total, True
        elif family.name in KV_USAGE:
            kv, found = max([kv, *(s.value for s in family.samples)]), True
    return EngineReport(waiting, running, kv) if found else None
