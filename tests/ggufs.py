"""GGUF files for tests, written by llama.cpp's own `gguf` package (an independent writer)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

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
