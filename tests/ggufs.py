"""GGUF files for tests, written by llama.cpp's own `gguf` package (an independent writer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from llm_operator.profiles.gguf import read_header

Fill = Callable[[gguf.GGUFWriter], None]


def write_gguf(path: Path, arch: str, fill: Fill) -> Path:
    """A GGUF file with ``fill``'s metadata and one small tensor."""
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    fill(writer)
    writer.add_tensor("token_embd.weight", np.zeros((8, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def write_lora(path: Path, base: Path, rank: int = 4, targets: tuple[str, ...] = ("ffn_down",),
               strength: float = 0.5, seed: int = 7) -> Path:
    """A LoRA adapter in GGUF for ``base`` (llama.cpp's format: A and B per adapted weight).

    Random low-rank deltas on every block's ``targets``: strong enough that the adapted
    model answers differently from the base model, shaped so llama.cpp accepts them.
    """
    with base.open("rb") as stream:  # gguf.GGUFReader decodes the whole vocabulary: 20 s
        header = read_header(stream, tensors=True)
    arch = header.architecture
    assert arch is not None, f"{base} names no architecture"
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type(gguf.GGUFType.ADAPTER)
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(rank))
    for name, shape in header.tensors.items():
        if not name.endswith(".weight") or name.split(".")[-2] not in targets:
            continue
        columns, rows = shape[:2]  # ggml order: inputs, outputs
        a = rng.normal(0, strength, (rank, columns)).astype(np.float32)
        b = rng.normal(0, strength, (rows, rank)).astype(np.float32)
        writer.add_tensor(f"{name}.lora_a", a)
        writer.add_tensor(f"{name}.lora_b", b)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def unloadable_gguf(path: Path) -> Path:
    """A llama GGUF whose header passes `llmop up`'s and the verify container's checks and
    that llama.cpp cannot load: one tensor of the many a llama model has."""
    def fill(writer: gguf.GGUFWriter) -> None:
        writer.add_block_count(2)
        writer.add_embedding_length(64)
        writer.add_head_count(4)
        writer.add_context_length(2048)
        writer.add_file_type(0)

    return write_gguf(path, "llama", fill)
