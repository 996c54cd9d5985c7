"""The model shapes bench/gpu writes as GGUF files with random weights (stdlib only).

Each is a real architecture's published configuration (Hugging Face ``config.json``):
the tensors llama.cpp's loader expects for it, at their real sizes, so the memory an engine
takes on a card is the memory the real model would take. Only the values are random.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

Dims = tuple[int, ...]  # GGUF order: ne0 (the row length) first


@dataclass(frozen=True)
class Shape:
    """One architecture's dimensions, as llama.cpp's GGUF keys name them."""

    name: str
    arch: str  # general.architecture
    vocab: int
    embd: int
    layers: int
    ff: int  # the dense feed-forward width (0 for an all-expert MoE)
    heads: int
    kv_heads: int
    head_dim: int
    context: int  # {arch}.context_length: what the model was trained for
    rope_base: float
    rms_eps: float
    tied: bool = False  # the output projection is the token embedding
    gemma_norms: bool = False  # q/k norms and post-attention/post-ffn norms (Gemma 3)
    qk_norm: bool = False  # q/k norms only (Qwen 3)
    swa: int = 0  # sliding-window width of the local layers (Gemma 3: 5 of 6)
    rope_scale: float = 0.0  # linear RoPE scaling of the global layers
    experts: int = 0
    experts_used: int = 0
    ff_expert: int = 0

    def tensors(self) -> Iterator[tuple[str, Dims, bool]]:
        """(name, dims, is_matrix) for every tensor; matrices are the quantizable ones."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        yield "token_embd.weight", (self.embd, self.vocab), True
        yield "output_norm.weight", (self.embd,), False
        if not self.tied:
            yield "output.weight", (self.embd, self.vocab), True
        for i in range(self.layers):
            b = f"blk.{i}."
            yield b + "attn_norm.weight", (self.embd,), False
            yield b + "attn_q.weight", (self.embd, q), True
            yield b + "attn_k.weight", (self.embd, kv), True
            yield b + "attn_v.weight", (self.embd, kv), True
            yield b + "attn_output.weight", (q, self.embd), True
            if self.gemma_norms or self.qk_norm:
                yield b + "attn_q_norm.weight", (self.head_dim,), False
                yield b + "attn_k_norm.weight", (self.head_dim,), False
            if self.gemma_norms:
                yield b + "post_attention_norm.weight", (self.embd,), False
                yield b + "post_ffw_norm.weight", (self.embd,), False
            yield b + "ffn_norm.weight", (self.embd,), False
            if self.experts:
                yield b + "ffn_gate_inp.weight", (self.embd, self.experts), False
                yield b + "ffn_gate_exps.weight", (self.embd, self.ff_expert, self.experts), True
                yield b + "ffn_up_exps.weight", (self.embd, self.ff_expert, self.experts), True
                yield b + "ffn_down_exps.weight", (self.ff_expert, self.embd, self.experts), True
            else:
                yield b + "ffn_gate.weight", (self.embd, self.ff), True
                yield b + "ffn_up.weight", (self.embd, self.ff), True
                yield b + "ffn_down.weight", (self.ff, self.embd), True

    @property
    def total_params_b(self) -> float:
        """Every weight, in billions (the tied embedding once)."""
        return sum(_count(d) for _, d, _ in self.tensors()) / 1e9

    @property
    def active_params_b(self) -> float:
        """The weights one token passes through, in billions (MoE: the used experts only)."""
        total = 0
        for name, dims, _ in self.tensors():
            n = _count(dims)
            if name.endswith("_exps.weight"):
                n = n * self.experts_used // self.experts
            total += n
        return total / 1e9


def _count(dims: Dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


SHAPES = {s.name: s for s in (
    # meta-llama/Llama-3.1-8B-Instruct
    Shape("llama-3.1-8b", "llama", vocab=128256, embd=4096, layers=32, ff=14336, heads=32,
          kv_heads=8, head_dim=128, context=131072, rope_base=500000.0, rms_eps=1e-5),
    # google/gemma-3-4b-it, its language model
    Shape("gemma-3-4b", "gemma3", vocab=262144, embd=2560, layers=34, ff=10240, heads=8,
          kv_heads=4, head_dim=256, context=131072, rope_base=1e6, rms_eps=1e-6, tied=True,
          gemma_norms=True, swa=1024, rope_scale=8.0),
    # Qwen/Qwen3-30B-A3B
    Shape("qwen3-30b-a3b", "qwen3moe", vocab=151936, embd=2048, layers=48, ff=0, heads=32,
          kv_heads=4, head_dim=128, context=40960, rope_base=1e6, rms_eps=1e-6,
          qk_norm=True, experts=128, experts_used=8, ff_expert=768),
)}
