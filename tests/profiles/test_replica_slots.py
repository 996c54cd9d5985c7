"""How many requests a replica serves at once: what the router's flow control counts on."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.concurrency import replica_slots

from samples import sample_doc


def spec_of(stem: str, **spec: Any) -> Any:
    doc = sample_doc(stem)
    doc["spec"].update(spec)
    return parse_llmmodel(doc).spec


@pytest.mark.parametrize(("stem", "spec", "slots"), [
    ("qwen35-9b-cpu", {}, 1),
    ("qwen35-9b-cpu", {"engineArgs": {"num-parallel": "4"}}, 4),
    ("qwen35-9b-cpu", {"inferenceEngine": "llamacpp", "llamaCpp": {"parallelSlots": 8}}, 8),
    ("gemma4-31b-nvidia", {}, 256),
    ("gemma4-31b-nvidia", {"engineArgs": {"max-num-seqs": "64"}}, 64),
    ("gemma4-31b-nvidia", {"resources": {"acceleratorCount": 1, "vramPerAcceleratorGiB": 80,
                                         "cpuMillicores": 8000, "memoryGiB": 64}}, 1024),
    ("gemma4-31b-nvidia", {"resources": {"acceleratorCount": 1, "vramPerAcceleratorGiB": 80,
                                         "preferredAcceleratorModel": "NVIDIA-A100-SXM4-80GB",
                                         "cpuMillicores": 8000, "memoryGiB": 64}}, 256),
    ("gemma4-31b-nvidia", {"acceleratorVendor": "cpu", "quantization": "BF16", "resources": {
        "acceleratorCount": 0, "cpuMillicores": 8000, "memoryGiB": 64}}, 128),
    ("gemma4-31b-nvidia", {"inferenceEngine": "sglang"}, None),
    ("gemma4-31b-nvidia", {"inferenceEngine": "sglang",
                           "engineArgs": {"max-running-requests": "48"}}, 48),
    ("gpt55-remote", {}, None),
], ids=["ollama-default", "ollama-num-parallel", "llamacpp-slots", "vllm-gpu-default",
        "vllm-max-num-seqs", "vllm-large-gpu", "vllm-a100", "vllm-cpu", "sglang-sized-at-start",
        "sglang-max-running-requests", "remote"])
def test_each_engine_says_how_many_requests_a_replica_runs(
        stem: str, spec: dict[str, Any], slots: int | None) -> None:
    assert replica_slots(spec_of(stem, **spec)) == slots
