"""vLLM on CPU: the RAM it needs and the KV-cache space it gets, one formula for CEL and Python.

vLLM's CPU backend holds 16-bit weights in RAM and takes a fixed KV cache
(``VLLM_CPU_KVCACHE_SPACE``, whole GiB) beside them, so the floor is linear in the parameter
count: CEL can check it at admission with the same numbers the planner uses. A replica
across ``serving.nodes`` pods (pipeline parallel) holds a share of the layers in each pod:
the weights divide among them, the runtime and the KV space are each pod's own.
"""

from __future__ import annotations

import math

from llm_operator.api.serving_rules import NODES_ASKED

GIB = 1024**3
# The weight formats vLLM serves on CPU (its docs: FP32, FP16 and BF16): 16-bit here.
QUANTIZATIONS = ("None", "FP16", "BF16")
WEIGHT_GIB_PER_BILLION = 2e9 / GIB  # 16-bit weights: ~1.86 GiB per billion parameters
# Python, torch and vLLM's three processes (API server, engine core, worker) beside the
# weights and the KV cache, measured on Gemma 3 270M (proportional set size, torch.compile's
# buffers included): ~3.9 GiB. Activations and buffers grow with the model (2% of the weights).
RUNTIME_GIB = 4.0
WEIGHTS_OVERHEAD_SHARE = 0.02
MIN_KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE takes whole GiB; 0 would mean "vLLM decides"


# Weights and the overhead that grows with them, per billion parameters (rounded as CEL has it).
PER_BILLION_GIB = round(WEIGHT_GIB_PER_BILLION * (1 + WEIGHTS_OVERHEAD_SHARE), 4)


def weights_gib(params_b: float, nodes: int = 1) -> float:
    """The 16-bit weights one pod holds (its pipeline stage's share over ``nodes`` pods)."""
    return params_b * WEIGHT_GIB_PER_BILLION / nodes


def runtime_gib(params_b: float, nodes: int = 1) -> float:
    """What vLLM takes beside the weights and the KV cache: the fixed part and the share."""
    return RUNTIME_GIB + params_b * (PER_BILLION_GIB - WEIGHT_GIB_PER_BILLION) / nodes


def memory_floor_gib(params_b: float, nodes: int = 1) -> float:
    """The least resources.memoryGiB that holds the weights, the runtime and 1 GiB of KV cache."""
    return params_b * PER_BILLION_GIB / nodes + RUNTIME_GIB + MIN_KV_CACHE_GIB


def kv_cache_space_gib(params_b: float, memory_gib: int, nodes: int = 1) -> int:
    """VLLM_CPU_KVCACHE_SPACE: the whole GiB left of memoryGiB, at least the minimum."""
    left = memory_gib - params_b * PER_BILLION_GIB / nodes - RUNTIME_GIB
    return max(MIN_KV_CACHE_GIB, math.floor(left))


# The same floor as memory_floor_gib, for the CRD (resources.memoryGiB has a default;
# serving.nodes unset is one node).
_NODES_CEL = f"({NODES_ASKED} ? double(self.serving.nodes) : 1.0)"
MEMORY_CEL = (
    "double(self.resources.memoryGiB) >= "
    f"double(self.totalParametersBillions) * {PER_BILLION_GIB:.4f} / {_NODES_CEL} + "
    f"{RUNTIME_GIB + MIN_KV_CACHE_GIB}"
)
MEMORY_MESSAGE = (
    "resources.memoryGiB is too small for vLLM on acceleratorVendor cpu: it needs "
    f"totalParametersBillions x {PER_BILLION_GIB:.2f} GiB (16-bit weights, divided among "
    f"serving.nodes) + {RUNTIME_GIB} GiB (runtime) + {MIN_KV_CACHE_GIB} GiB (KV cache) per "
    "pod; raise memoryGiB, or use inferenceEngine llamacpp with a GGUF quantization"
)
