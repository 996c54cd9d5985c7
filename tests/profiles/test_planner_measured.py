"""The planner against what llama-server really held on a card (bench/gpu, docs/planner.md).

Each row is one model file served with the arguments the operator renders for an NVIDIA
llama.cpp model, measured on an H200 (2026-11-27): the memory nvidia-smi charged to
llama-server after a full-context request on every slot. The planner may overestimate by at
most 10%, and must never underestimate (it would admit what does not fit).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.api.v1alpha1 import LLMModel, LLMModelStatus
from llm_operator.profiles.planner import plan

MIB = 2**20


@dataclass(frozen=True)
class Shape:
    """What the spec says (parameters) and what the file's header says."""

    params_b: float
    active_b: float | None
    architecture: str
    layers: int
    embedding: int
    heads: int
    kv_heads: int
    head_width: int
    window: int | None = None
    windowed_layers: int | None = None


LLAMA_8B = Shape(8.03, None, "llama", 32, 4096, 32, 8, 128)
GEMMA3_4B = Shape(3.88, None, "gemma3", 34, 2560, 8, 4, 256, window=1024, windowed_layers=29)
QWEN3_30B_A3B = Shape(30.53, 3.35, "qwen3moe", 48, 2048, 32, 4, 128)

# (shape, quantization, context per slot K, slots, file bytes, MiB held after full contexts)
MEASURED = [
    (LLAMA_8B, "GGUF-Q4_K_M", 8, 1, 4_916_138_784, 6144),
    (LLAMA_8B, "GGUF-Q4_K_M", 16, 4, 4_916_138_784, 13320),
    (LLAMA_8B, "GGUF-Q4_K_M", 4, 8, 4_916_138_784, 9214),
    (LLAMA_8B, "GGUF-F16", 8, 1, 16_064_295_680, 16160),
    (LLAMA_8B, "GGUF-F16", 16, 4, 16_064_295_680, 23336),
    (GEMMA3_4B, "GGUF-Q4_K_M", 8, 1, 2_489_949_504, 3392),
    (GEMMA3_4B, "GGUF-Q4_K_M", 16, 4, 2_489_949_504, 5042),
    (QWEN3_30B_A3B, "GGUF-Q8_0", 8, 1, 32_481_837_856, 32222),
    (QWEN3_30B_A3B, "GGUF-Q8_0", 16, 4, 32_481_837_856, 37606),
]
IDS = [f"{s.architecture}-{q}-{k}k-x{n}" for s, q, k, n, _, _ in MEASURED]
# Before the header is read, the parameter count cannot tell that 29 of Gemma 3's 34 layers
# attend through a 1024-token window: the spec's estimate holds every layer's full context.
SLIDING_WINDOW_UNSEEN = {"gemma3-GGUF-Q4_K_M-8k-x1": 1.15, "gemma3-GGUF-Q4_K_M-16k-x4": 1.85}


def model(shape: Shape, quantization: str, context_k: int, slots: int,
          card: str = "H100") -> LLMModel:
    spec: dict[str, object] = {
        "modelId": "bench/model", "deploymentMode": "local", "acceleratorVendor": "nvidia",
        "inferenceEngine": "llamacpp", "modelType": "MoE" if shape.active_b else "Dense",
        "totalParametersBillions": shape.params_b, "quantization": quantization,
        "contextWindowK": context_k, "llamaCpp": {"parallelSlots": slots},
        "resources": {"acceleratorCount": 1, "preferredAcceleratorModel": card},
        "modelSource": {"type": "huggingface"},
    }
    if shape.active_b:
        spec["activeParametersBillions"] = shape.active_b
    return LLMModel.model_validate({"apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
                                    "metadata": {"name": "m", "namespace": "ns"},
                                    "spec": spec})


def with_header(m: LLMModel, shape: Shape, size_bytes: int) -> LLMModel:
    header = ModelFileStatus(
        file="model.gguf", size_bytes=size_bytes, architecture=shape.architecture,
        layers=shape.layers, embedding_length=shape.embedding, head_count=shape.heads,
        head_count_kv=shape.kv_heads, key_length=shape.head_width,
        value_length=shape.head_width, sliding_window=shape.window,
        sliding_window_layers=shape.windowed_layers)
    return m.model_copy(update={"status": LLMModelStatus(model=header)})


def estimated_mib(m: LLMModel) -> float:
    verdict = plan(m)
    assert verdict.estimate is not None
    return verdict.estimate.total_gib * 1024


@pytest.mark.parametrize(("shape", "quantization", "context_k", "slots", "size", "held"),
                         MEASURED, ids=IDS)
def test_from_the_header_within_10_percent_above(shape: Shape, quantization: str,
                                                 context_k: int, slots: int, size: int,
                                                 held: int) -> None:
    m = with_header(model(shape, quantization, context_k, slots), shape, size)
    assert held <= estimated_mib(m) <= held * 1.10


@pytest.mark.parametrize(("shape", "quantization", "context_k", "slots", "size", "held"),
                         MEASURED, ids=IDS)
def test_from_the_spec_alone_never_below(request: pytest.FixtureRequest, shape: Shape,
                                         quantization: str, context_k: int, slots: int,
                                         size: int, held: int) -> None:
    ceiling = SLIDING_WINDOW_UNSEEN.get(request.node.callspec.id, 1.10)
    assert held <= estimated_mib(model(shape, quantization, context_k, slots)) <= held * ceiling


@pytest.mark.parametrize(("card", "verdict"), [("RTX 5090", "does-not-fit"),
                                               ("L40S", "fits")])
def test_a_placement_the_measurements_rule_out_is_refused(card: str, verdict: str) -> None:
    """Qwen3-30B-A3B at Q8_0 with 4 slots of 16K held 36.7 GiB: more than a 32 GiB card."""
    m = model(QWEN3_30B_A3B, "GGUF-Q8_0", 16, 4, card=card)
    result = plan(with_header(m, QWEN3_30B_A3B, 32_481_837_856))
    assert result.verdict == verdict
    if verdict == "does-not-fit":
        assert result.reason.startswith("needs ~37.6 GiB but 1x NVIDIA RTX 5090 at 95% gives")
