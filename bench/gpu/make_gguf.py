"""Write a GGUF file of a real architecture's shape with random weights (numpy and gguf-py).

    PYTHONPATH=<llama.cpp>/gguf-py python make_gguf.py llama-3.1-8b F16 out.gguf
    ... make_gguf.py qwen3-30b-a3b Q8_0 out.gguf

F16 files are quantized further with llama.cpp's own ``llama-quantize`` (Q4_K_M), so their
size and tensor types are exactly what a user's file has. Q8_0 blocks are written directly
(a valid half-precision scale and random 8-bit values), for shapes too large to write at
16 bits first. The vocabulary is a made-up SentencePiece-style list of the real size
(requests send token ids, never text). ``--tiny`` shrinks layers and widths, to try the
whole path on a CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import gguf
from shapes import SHAPES, Shape

FILE_TYPES = {"F16": 1, "Q8_0": 7}
Q8_BLOCK, Q8_BYTES = 32, 34


def vocabulary(size: int) -> tuple[list[str], list[float], list[int]]:
    """<unk> <s> </s>, the 256 byte tokens, then distinct pieces up to ``size``."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [int(gguf.TokenType.UNKNOWN)] + [int(gguf.TokenType.CONTROL)] * 2
    types += [int(gguf.TokenType.BYTE)] * 256
    pieces = size - len(tokens)
    tokens += [f"\u2581t{i}" for i in range(pieces)]
    types += [int(gguf.TokenType.NORMAL)] * pieces
    scores = [0.0] * 259 + [-float(i) for i in range(pieces)]
    return tokens, scores, types


def _metadata(w: gguf.GGUFWriter, s: Shape, file_type: str) -> None:
    w.add_name(s.name)
    w.add_file_type(FILE_TYPES[file_type])
    w.add_context_length(s.context)
    w.add_embedding_length(s.embd)
    w.add_block_count(s.layers)
    if s.ff:
        w.add_feed_forward_length(s.ff)
    w.add_head_count(s.heads)
    w.add_head_count_kv(s.kv_heads)
    w.add_key_length(s.head_dim)
    w.add_value_length(s.head_dim)
    w.add_rope_dimension_count(s.head_dim)
    w.add_rope_freq_base(s.rope_base)
    w.add_layer_norm_rms_eps(s.rms_eps)
    w.add_vocab_size(s.vocab)
    if s.swa:
        w.add_sliding_window(s.swa)
    if s.rope_scale:
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(s.rope_scale)
    if s.experts:
        w.add_expert_count(s.experts)
        w.add_expert_used_count(s.experts_used)
        w.add_expert_feed_forward_length(s.ff_expert)
    tokens, scores, types = vocabulary(s.vocab)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def _count(dims: tuple[int, ...]) -> int:
    return int(np.prod(dims))


def write(s: Shape, file_type: str, out: Path, seed: int = 0) -> None:
    """The whole file: metadata, then every tensor as views of one random buffer."""
    rng = np.random.default_rng(seed)
    largest = max(_count(d) for _, d, m in s.tensors() if m)
    if file_type == "F16":
        pool = (rng.standard_normal(largest, dtype=np.float32) * 0.02).astype(np.float16)
    else:  # Q8_0: per 32 weights a float16 scale, then 32 signed bytes
        blocks = rng.integers(-127, 128, size=(largest // Q8_BLOCK, Q8_BYTES), dtype=np.int8)
        pool = blocks.view(np.uint8)
        pool[:, :2] = np.frombuffer(np.float16(0.02 / 127).tobytes(), dtype=np.uint8)
        pool = pool.reshape(-1)
    ones = np.ones(max(_count(d) for _, d, m in s.tensors() if not m), dtype=np.float32)
    w = gguf.GGUFWriter(out, s.arch)
    _metadata(w, s, file_type)
    for name, dims, matrix in s.tensors():
        shape = tuple(reversed(dims))  # numpy: the row length last
        n = _count(dims)
        if not matrix:
            w.add_tensor(name, ones[:n].reshape(shape))
        elif file_type == "F16":
            w.add_tensor(name, pool[:n].reshape(shape))
        else:
            rows = (*shape[:-1], shape[-1] // Q8_BLOCK * Q8_BYTES)
            w.add_tensor(name, pool[:_count(rows)].reshape(rows),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tiny(s: Shape) -> Shape:
    """The same architecture, small enough for a CPU: 2 layers, narrow, a 4K vocabulary."""
    return dataclasses.replace(s, vocab=4096, embd=256, layers=2, ff=512 if s.ff else 0,
                               heads=4, kv_heads=2, head_dim=64,
                               experts=8 if s.experts else 0,
                               experts_used=2 if s.experts else 0,
                               ff_expert=128 if s.experts else 0, swa=128 if s.swa else 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("file_type", choices=sorted(FILE_TYPES))
    p.add_argument("out", type=Path)
    p.add_argument("--tiny", action="store_true", help="2 layers, narrow: a CPU trial")
    a = p.parse_args()
    shape = tiny(SHAPES[a.shape]) if a.tiny else SHAPES[a.shape]
    started = time.monotonic()
    write(shape, a.file_type, a.out)
    print(f"{a.out}: {shape.name} {a.file_type}, {a.out.stat().st_size / 2**30:.2f} GiB, "
          f"{shape.total_params_b:.2f}B parameters, {time.monotonic() - started:.0f}s")


if __name__ == "__main__":
    main()
