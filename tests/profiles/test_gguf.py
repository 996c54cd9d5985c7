"""GGUF headers, read by our pure reader from files written by llama.cpp's own `gguf` package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from llm_operator.profiles.estimate import estimate_from_file
from llm_operator.profiles.gguf import ArrayOf, GgufError, describe, read_header

from ggufs import write_gguf

Writer = Callable[[gguf.GGUFWriter], None]


def llama_8b(w: gguf.GGUFWriter) -> None:
    """The shape of a Llama 3 8B: 32 layers, 32 heads, 8 key/value heads, 4096 wide."""
    w.add_name("Llama 3 8B Instruct")
    w.add_block_count(32)
    w.add_context_length(8192)
    w.add_embedding_length(4096)
    w.add_head_count(32)
    w.add_head_count_kv(8)
    w.add_file_type(15)
    w.add_token_list([f"tok{i}" for i in range(5000)])
    w.add_token_scores([0.5] * 5000)


def gemma3_like(w: gguf.GGUFWriter) -> None:
    """Heads wider than embedding/heads (Gemma 3 declares key and value lengths)."""
    w.add_block_count(18)
    w.add_context_length(32768)
    w.add_embedding_length(640)
    w.add_head_count(4)
    w.add_head_count_kv(1)
    w.add_key_length(256)
    w.add_value_length(256)
    w.add_file_type(7)


def per_layer_kv_heads(w: gguf.GGUFWriter) -> None:
    """Some architectures give head counts per layer, as an array."""
    w.add_block_count(4)
    w.add_embedding_length(1024)
    w.add_head_count(16)
    w.add_head_count_kv([2, 4, 4, 8])


def write(tmp_path: Path, arch: str, fill: Writer) -> Path:
    return write_gguf(tmp_path / "model.gguf", arch, fill)


@pytest.mark.parametrize(("arch", "fill", "expected"), [
    ("llama", llama_8b, {
        "architecture": "llama", "name": "Llama 3 8B Instruct", "quantization": "Q4_K_M",
        "layers": 32, "context_length": 8192, "embedding_length": 4096, "head_count": 32,
        "head_count_kv": 8, "key_length": None}),
    ("gemma3", gemma3_like, {
        "architecture": "gemma3", "name": None, "quantization": "Q8_0", "layers": 18,
        "context_length": 32768, "head_count_kv": 1, "key_length": 256, "value_length": 256}),
    ("openelm", per_layer_kv_heads, {"layers": 4, "head_count_kv": 8, "quantization": None}),
], ids=["llama-8b", "gemma3", "per-layer-heads"])
def test_the_header_says_what_the_writer_wrote(tmp_path: Path, arch: str, fill: Writer,
                                               expected: dict[str, Any]) -> None:
    path = write(tmp_path, arch, fill)
    with path.open("rb") as stream:
        header = read_header(stream)
    status = describe(header, file=path.name, size_bytes=path.stat().st_size)
    assert {k: getattr(status, k) for k in expected} == expected
    assert header.version == 3 and header.tensor_count == 1


def test_arrays_are_skipped_with_their_length(tmp_path: Path) -> None:
    with write(tmp_path, "llama", llama_8b).open("rb") as stream:
        metadata = read_header(stream).metadata
    assert metadata["tokenizer.ggml.tokens"] == ArrayOf(8, 5000)
    assert metadata["tokenizer.ggml.scores"] == ArrayOf(6, 5000)


def test_tensor_shapes_are_read_when_asked_for_as_the_reference_reader_sees_them(
        tmp_path: Path) -> None:
    def more_tensors(w: gguf.GGUFWriter) -> None:
        llama_8b(w)
        w.add_tensor("blk.0.ffn_down.weight", np.zeros((6, 10), dtype=np.float32))
        w.add_tensor("output_norm.weight", np.zeros(10, dtype=np.float32))

    path = write(tmp_path, "llama", more_tensors)
    with path.open("rb") as stream:
        without = read_header(stream)
    with path.open("rb") as stream:
        header = read_header(stream, tensors=True)
    reference = {t.name: tuple(int(n) for n in t.shape) for t in gguf.GGUFReader(path).tensors}
    assert without.tensors == {} and header.metadata == without.metadata
    assert header.tensors == reference == {  # ggml's order: inputs first
        "blk.0.ffn_down.weight": (10, 6), "output_norm.weight": (10,),
        "token_embd.weight": (4, 8)}


def test_the_kv_cache_of_a_llama_8b_is_128_kib_per_token(tmp_path: Path) -> None:
    """32 layers x 8 KV heads x (128 + 128) x 2 bytes: the planner's fitted curve agrees."""
    with write(tmp_path, "llama", llama_8b).open("rb") as stream:
        status = describe(read_header(stream), file="m", size_bytes=4_920_000_000)
    estimate = estimate_from_file(status, context_tokens=8192)
    assert estimate is not None
    assert estimate.kv_cache_gib == pytest.approx(1.0)  # 128 KiB x 8192 tokens
    assert estimate.weights_gib == pytest.approx(4.582, abs=1e-3)


def windowed(layers: int, window: int | None, pattern: int | list[bool] | None = None
             ) -> Writer:
    """Gemma 3 4B's attention (8 heads, 4 key/value heads 256 wide) over ``layers``."""
    def fill(w: gguf.GGUFWriter) -> None:
        w.add_block_count(layers)
        w.add_embedding_length(2560)
        w.add_head_count(8)
        w.add_head_count_kv(4)
        w.add_key_length(256)
        w.add_value_length(256)
        if window is not None:
            w.add_sliding_window(window)
        if pattern is not None:
            w.add_sliding_window_pattern(pattern)
    return fill


@pytest.mark.parametrize(("arch", "fill", "window", "windowed_layers"), [
    # llama.cpp's own layouts when the header has no pattern (src/models/*.cpp)
    ("gemma3", windowed(34, 1024), 1024, 29),  # Gemma 3 4B: every 6th layer is global
    ("gemma3", windowed(62, 1024), 1024, 52),  # Gemma 3 27B
    ("gemma2", windowed(42, 4096), 4096, 21),  # alternating
    ("cohere2moe", windowed(8, 4096), 4096, 6),  # the global layer first in each group of 4
    # the header's own pattern wins: an int, or one flag per layer
    ("gemma3", windowed(12, 512, 4), 512, 9),
    ("gemma3", windowed(4, 512, [True, False, True, True]), 512, 3),
    # no window, or a layout this reader does not know: every layer counts as full
    ("gemma3", windowed(34, None), None, None),
    ("llama", windowed(32, 4096), 4096, None),
], ids=["gemma3-4b", "gemma3-27b", "gemma2", "dense-first", "pattern-int", "pattern-flags",
        "no-window", "unknown-layout"])
def test_sliding_window_layers_follow_llama_cpp(tmp_path: Path, arch: str, fill: Writer,
                                                window: int | None,
                                                windowed_layers: int | None) -> None:
    with write(tmp_path, arch, fill).open("rb") as stream:
        status = describe(read_header(stream), file="m", size_bytes=1)
    assert (status.sliding_window, status.sliding_window_layers) == (window, windowed_layers)


@pytest.mark.parametrize(("context", "slots", "kv_mib"), [
    # Gemma 3 4B's shape: 5 global layers hold every token, 29 windowed layers the window
    # (1024) plus a 512-token micro-batch per slot; 4 KiB per token per layer. The
    # figures llama.cpp reported on an H200 (bench/gpu, docs/planner.md).
    (8192, 1, 334),
    (65536, 4, 1976),
    # a context shorter than the window: the windowed layers hold only the context
    (1024, 1, 34 * 4),
])
def test_windowed_layers_hold_their_window_per_slot(tmp_path: Path, context: int, slots: int,
                                                    kv_mib: float) -> None:
    with write(tmp_path, "gemma3", windowed(34, 1024)).open("rb") as stream:
        status = describe(read_header(stream), file="m", size_bytes=1)
    estimate = estimate_from_file(status, context, slots=slots)
    assert estimate is not None
    assert estimate.kv_cache_gib * 1024 == pytest.approx(kv_mib)


def test_without_head_counts_the_parameter_count_decides(tmp_path: Path) -> None:
    with write(tmp_path, "llama", lambda w: None).open("rb") as stream:
        status = describe(read_header(stream), file="m", size_bytes=1)
    assert estimate_from_file(status, 4096) is None


@pytest.mark.parametrize(("cut", "message"), [
    (lambda data: b"GGML" + data[4:], "not a GGUF file"),
    (lambda data: data[:4] + (9).to_bytes(4, "little") + data[8:], "GGUF version 9"),
    (lambda data: data[:200], "the GGUF header ends early"),
    (lambda data: data[:24] + (1 << 40).to_bytes(8, "little") + data[32:],
     "claims 1099511627776 bytes"),
    (lambda data: data[:16] + (1 << 20).to_bytes(8, "little") + data[24:], "claims 1048576 keys"),
], ids=["magic", "version", "truncated", "huge-string", "huge-key-count"])
def test_a_broken_header_is_refused_with_why(tmp_path: Path, cut: Callable[[bytes], bytes],
                                             message: str) -> None:
    path = write(tmp_path, "llama", llama_8b)
    path.write_bytes(cut(path.read_bytes()))
    with path.open("rb") as stream, pytest.raises(GgufError, match=message):
        read_header(stream)


@pytest.mark.parametrize(("cut", "message"), [
    (lambda data: data[:data.index(b"token_embd.weight") + 20], "the GGUF header ends early"),
    (lambda data: data.replace(b"token_embd.weight\x02\x00\x00\x00",
                               b"token_embd.weight\x09\x00\x00\x00"),
     "token_embd.weight claims 9 dimensions"),
], ids=["truncated-infos", "too-many-dims"])
def test_broken_tensor_infos_are_refused_with_why(tmp_path: Path, cut: Callable[[bytes], bytes],
                                                  message: str) -> None:
    path = write(tmp_path, "llama", llama_8b)
    path.write_bytes(cut(path.read_bytes()))
    with path.open("rb") as stream:
        read_header(stream)  # the pairs alone are whole
    with path.open("rb") as stream, pytest.raises(GgufError, match=message):
        read_header(stream, tensors=True)


def test_items_that_straddle_the_read_buffer_are_read_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "llama", llama_8b)
    with path.open("rb") as stream:
        whole = read_header(stream).metadata
    monkeypatch.setattr("llm_operator.profiles.gguf._Reader.CHUNK", 7)  # every item crosses
    with path.open("rb") as stream:
        assert read_header(stream).metadata == whole


def with_template(w: gguf.GGUFWriter) -> None:
    llama_8b(w)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")


@pytest.mark.parametrize(("fill", "carried"), [(with_template, True), (llama_8b, False)],
                         ids=["the file's own template", "none"])
def test_the_header_says_whether_the_file_carries_a_chat_template(
        tmp_path: Path, fill: Writer, carried: bool) -> None:
    with write(tmp_path, "llama", fill).open("rb") as stream:
        status = describe(read_header(stream), file="m", size_bytes=1)
    assert status.chat_template is carried
