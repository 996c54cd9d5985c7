"""vLLM on CPU: the RAM it needs and the KV-cache space it gets, one formula for CEL and Python.

vLLM's CPU backend holds 16-bit weights in RAM and takes a fixed KV cache
(``VLLM_CPU_KVCACHE_SPACE``, whole GiB) beside them, so the floor is linear in the parameter
count: CEL can check it at admission with the same numbers the planner uses.
"""

from __future__ import annotations

import math

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


def weights_gib(params_b: float) -> float:
    return params_b * WEIGHT_GIB_PER_BILLION


def runtime_gib(params_b: float) -> float:
    """What vLLM takes beside the weights and the KV cache: the fixed part and the share."""
    return RUNTIME_GIB + params_b * (PER_BILLION_GIB - WEIGHT_GIB_PER_BILLION)


def memory_floor_gib(params_b: float) -> float:
    """The least resources.memoryGiB that holds the weights, the runtime and 1 GiB of KV cache."""
    return params_b * PER_BILLION_GIB + RUNTIME_GIB + MIN_KV_CACHE_GIB


def kv_cache_space_gib(params_b: float, memory_gib: int) -> int:
    """VLLM_CPU_KVCACHE_SPACE: the whole GiB left of memoryGiB, at least the minimum."""
    left = memory_gib - params_b * PER_BILLION_GIB - RUNTIME_GIB
    return max(MIN_KV_CACHE_GIB, math.floor(left))


# The same floor as memory_floor_gib, for the CRD (resources.memoryGiB has a default).
MEMORY_CEL = (
    "double(self.resources.memoryGiB) >= "
    f"double(self.totalParametersBillions) * {PER_BILLION_GIB:.4f} + "
    f"{RUNTIME_GIB + MIN_KV_CACHE_GIB}"
)
MEMORY_MESSAGE = (
    "resources.memoryGiB is too small for vLLM on acceleratorVendor cpu: it needs "
    f"totalParametersBillions x {PER_BILLION_GIB:.2f} GiB (16-bit weights) + {RUNTIME_GIB} GiB "
    f"(runtime) + {MIN_KV_CACHE_GIB} GiB (KV cache); raise memoryGiB, or use inferenceEngine "
    "llamacpp with a GGUF quantization"
)
