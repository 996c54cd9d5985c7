"""How many requests one replica's engine serves at once: the router's flow-control slots."""

from __future__ import annotations

from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.profiles.llamaserver import parallel_slots

# vLLM's own default max_num_seqs for its OpenAI server (vllm/engine/arg_utils.py): 128 on
# CPU, 1024 on GPUs of 70 GiB and more other than the A100, 256 elsewhere.
VLLM_CPU_SEQS, VLLM_LARGE_GPU_SEQS, VLLM_SEQS = 128, 1024, 256
LARGE_GPU_GIB = 70


def _int_arg(spec: LLMModelSpec, *names: str) -> int | None:
    args = spec.engine_args or {}
    for name in names:
        value = args.get(name, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def replica_slots(spec: LLMModelSpec) -> int | None:
    """Requests a replica runs at once; more wait in its engine (None: unknown).

    llama.cpp and Ollama: their slots. vLLM: ``max-num-seqs`` from engineArgs, else its
    default for the hardware. SGLang: ``max-running-requests``, else unknown (SGLang sizes
    it from memory at start). Remote models: None (their gateway has its own limits), and
    prefill/decode models (their proxy decides where a request runs).
    """
    if spec.is_remote or (spec.serving is not None and spec.serving.disaggregation):
        return None
    engine = spec.inference_engine
    if engine in ("llamacpp", "ollama"):
        return parallel_slots(spec)
    if engine == "sglang":
        return _int_arg(spec, "max-running-requests")
    asked = _int_arg(spec, "max-num-seqs")
    if asked is not None:
        return asked
    if spec.accelerator_vendor == "cpu":
        return VLLM_CPU_SEQS
    vram = spec.resources.vram_per_accelerator_gi_b
    card = spec.resources.preferred_accelerator_model or ""
    if vram is not None and vram >= LARGE_GPU_GIB and "a100" not in card.lower():
        return VLLM_LARGE_GPU_SEQS
    return VLLM_SEQS
