"""How much memory one replica needs: weights, KV cache and overhead, from the spec or a file."""

from __future__ import annotations

import math
from dataclasses import dataclass

from llm_operator.api.model_status import ModelFileStatus

GIB = 1024**3

# Stored bits per weight, including the per-group scales of block formats.
BITS_PER_WEIGHT: dict[str, float] = {
    "None": 16.0, "FP16": 16.0, "BF16": 16.0,
    "FP8": 8.0, "INT8": 8.0, "GGUF-Q8_0": 8.5, "GGUF-F16": 16.0, "GGUF-BF16": 16.0,
    "MXFP6": 6.25, "GGUF-Q4_K_M": 4.85, "FP4": 4.5,
    "INT4": 4.25, "QAT-INT4": 4.25, "GPTQ": 4.25, "AWQ": 4.25, "MXFP4": 4.25,
}

# KV cache per token (16-bit K and V), fitted to GQA models: ~128 KiB at 8B, ~320 KiB at 70B.
KV_KIB_PER_TOKEN_COEFF = 53.0
KV_KIB_PER_TOKEN_EXP = 0.42
DEFAULT_CONTEXT_TOKENS = 4096
# Overhead beside weights and KV cache, as (GiB, fraction of the weights): the accelerator's
# runtime context, kernels and activation buffers. llama.cpp (and Ollama, llama.cpp inside)
# holds only its CUDA context and compute buffers of ~0.1 GiB (flash attention on): 0.67 to
# 0.83 GiB measured on an H200 for 2.3 to 30 GiB of weights (bench/gpu, docs/planner.md).
ACCELERATOR_OVERHEAD = (1.0, 0.05)
GGUF_ACCELERATOR_OVERHEAD = (0.75, 0.02)
CPU_OVERHEAD = (0.5, 0.02)
# llama.cpp's sliding-window layers keep the window plus one micro-batch (512 tokens) per
# slot, in blocks of 256 cells (llama-kv-cache-iswa.cpp).
UBATCH_TOKENS = 512
KV_CELL_BLOCK = 256


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


def overhead_gib(weights_gib: float, on_accelerator: bool, gguf_engine: bool = False) -> float:
    """Runtime overhead beside weights and KV cache, in GiB.

    1 GiB + 5% of the weights on an accelerator (0.75 GiB + 2% for llama.cpp and Ollama,
    ``gguf_engine``), 0.5 GiB + 2% on CPU.
    """
    if not on_accelerator:
        base, share = CPU_OVERHEAD
    else:
        base, share = GGUF_ACCELERATOR_OVERHEAD if gguf_engine else ACCELERATOR_OVERHEAD
    return base + share * weights_gib


def estimate_memory(
    total_params_b: float,
    active_params_b: float | None,
    quantization: str,
    context_tokens: int,
    on_accelerator: bool = True,
    *,
    gguf_engine: bool = False,
) -> Estimate:
    """Weights (total params x bytes per param) + KV cache for one full context + overhead.

    The KV cache scales with the attention size, which for MoE follows the active parameters.
    Overhead: ``overhead_gib`` (``gguf_engine``: llama.cpp or Ollama).
    """
    weights = total_params_b * 1e9 * BITS_PER_WEIGHT[quantization] / 8 / GIB
    attention_params = active_params_b or total_params_b
    kv_per_token = KV_KIB_PER_TOKEN_COEFF * attention_params**KV_KIB_PER_TOKEN_EXP * 1024
    kv = kv_per_token * context_tokens / GIB
    return Estimate(weights, kv, overhead_gib(weights, on_accelerator, gguf_engine),
                    context_tokens)


def window_cells(window: int, context_tokens: int, slots: int) -> int:
    """KV cells of a sliding-window layer in llama.cpp (a full layer holds the context).

    Per slot, the window plus one micro-batch, rounded up to 256 cells, and never more than
    the slot's context.
    """
    per_slot = context_tokens // max(slots, 1)
    padded = -(-(window + UBATCH_TOKENS) // KV_CELL_BLOCK) * KV_CELL_BLOCK
    return max(slots, 1) * min(per_slot, padded)


def estimate_from_file(model: ModelFileStatus, context_tokens: int,
                       on_accelerator: bool = False, *, slots: int = 1,
                       gguf_engine: bool = True) -> Estimate | None:
    """The memory estimate from a GGUF file's real numbers instead of the parameter count.

    Its size for the weights; its layers, key/value heads and head widths for the KV cache
    (16-bit K and V), with sliding-window layers holding only their window per slot
    (``window_cells``; ``context_tokens`` is the total over ``slots``). None when the header
    lacks what the KV cache needs (then the parameter count decides).
    """
    layers, heads, width = model.layers, model.head_count, model.embedding_length
    if not (layers and heads and width):
        return None
    key = model.key_length or width / heads
    value = model.value_length or key
    per_cell = (model.head_count_kv or heads) * (key + value) * 2
    windowed = min(model.sliding_window_layers or 0, layers) if model.sliding_window else 0
    cells = (layers - windowed) * context_tokens + windowed * window_cells(
        model.sliding_window or 0, context_tokens, slots)
    kv = per_cell * cells / GIB
    weights = model.size_bytes / GIB
    return Estimate(weights, kv, overhead_gib(weights, on_accelerator, gguf_engine),
                    context_tokens)


def cache_size_gib(estimate: Estimate, minimum: int) -> int:
    """Model-cache volume size: the weights on disk plus 30% and 2 GiB of slack."""
    return max(minimum, math.ceil(estimate.weights_gib * 1.3 + 2))
