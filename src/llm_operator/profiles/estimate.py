"""How much memory one replica needs: weights, KV cache and overhead, from the spec or a file."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_operator.api.model_status import ModelFileStatus

GIB = 1024**3

# Stored bits per weight, including the per-group scales of block formats.
BITS_PER_WEIGHT: dict[str, float] = {
    "None": 16.0, "FP16": 16.0, "BF16": 16.0,
    "FP8": 8.0, "INT8": 8.0, "GGUF-Q8_0": 8.5,
    "MXFP6": 6.25, "GGUF-Q4_K_M": 4.85, "FP4": 4.5,
    "INT4": 4.25, "QAT-INT4": 4.25, "GPTQ": 4.25, "AWQ": 4.25, "MXFP4": 4.25,
}

# KV cache per token (16-bit K and V), fitted to GQA models: ~128 KiB at 8B, ~320 KiB at 70B.
KV_KIB_PER_TOKEN_COEFF = 53.0
KV_KIB_PER_TOKEN_EXP = 0.42
DEFAULT_CONTEXT_TOKENS = 4096


@dataclass(frozen=True)
class Estimate:
    """Memory needed by one replica, in GiB."""

    weights_gib: float
    kv_cache_gib: float
    overhead_gib: float
    context_tokens: int
    adapters_gib: float = 0.0  # LoRA adapter buffers (profiles.adapters)

    @property
    def total_gib(self) -> float:
        return self.weights_gib + self.kv_cache_gib + self.overhead_gib + self.adapters_gib


def estimate_memory(
    total_params_b: float,
    active_params_b: float | None,
    quantization: str,
    context_tokens: int,
    on_accelerator: bool = True,
) -> Estimate:
    """Weights (total params x bytes per param) + KV cache for one full context + overhead.

    The KV cache scales with the attention size, which for MoE follows the active parameters.
    Overhead is runtime context, kernels and activation buffers: 1 GiB + 5% of the weights on
    an accelerator, 0.5 GiB + 2% on CPU.
    """
    weights = total_params_b * 1e9 * BITS_PER_WEIGHT[quantization] / 8 / GIB
    attention_params = active_params_b or total_params_b
    kv_per_token = KV_KIB_PER_TOKEN_COEFF * attention_params**KV_KIB_PER_TOKEN_EXP * 1024
    kv = kv_per_token * context_tokens / GIB
    overhead = 1.0 + 0.05 * weights if on_accelerator else 0.5 + 0.02 * weights
    return Estimate(weights, kv, overhead, context_tokens)


def estimate_from_file(model: ModelFileStatus, context_tokens: int,
                       on_accelerator: bool = False) -> Estimate | None:
    """The memory estimate from a GGUF file's real numbers instead of the parameter count.

    Its size for the weights; its layers, key/value heads and head widths for the KV cache
    (16-bit K and V). None when the header lacks what the KV cache needs (then the
    parameter count decides).
    """
    layers, heads, width = model.layers, model.head_count, model.embedding_length
    if not (layers and heads and width):
        return None
    key = model.key_length or width / heads
    value = model.value_length or key
    kv = layers * (model.head_count_kv or heads) * (key + value) * 2 * context_tokens / GIB
    weights = model.size_bytes / GIB
    overhead = 1.0 + 0.05 * weights if on_accelerator else 0.5 + 0.02 * weights
    return Estimate(weights, kv, overhead, context_tokens)


def cache_size_gib(estimate: Estimate, minimum: int) -> int:
    """Model-cache volume size: the weights on disk plus 30% and 2 GiB of slack."""
    return max(minimum, math.ceil(estimate.weights_gib * 1.3 + 2))
