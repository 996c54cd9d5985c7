"""The host-memory KV tier a model gets: its size, the engine flags that set it, its memory."""

from __future__ import annotations

from collections.abc import Sequence

from llm_operator.api.kv_cache import mib_quantity
from llm_operator.api.kv_cache_rules import TIER_VENDORS_VLLM
from llm_operator.api.v1alpha1 import LLMModelSpec

# llama-server keeps idle slots' prompts in host memory up to --cache-ram (its own default
# is 8192 MiB, in no memory request). Unset, a model gets this much: room for a few
# conversations of a small model, a figure in its memory request, never 8 GiB unaccounted.
DEFAULT_LLAMACPP_MIB = 256
# The engines' own flags for the tier: kvCache.hostMemory sets them (and counts them).
TIER_ARGS = ("cache-ram", "kv-offloading-size", "kv-offloading-backend")


def has_tier(spec: LLMModelSpec, *, llama_server: bool = False) -> bool:
    """Whether the engine serving ``spec`` has a host tier the operator sets.

    llama.cpp always (``llama_server``: an Ollama model `llmop up` serves with
    llama-server too); vLLM on nvidia or amd; none elsewhere.
    """
    if spec.is_remote:
        return False
    if spec.inference_engine == "llamacpp" or llama_server:
        return True
    return spec.inference_engine == "vllm" and spec.accelerator_vendor in TIER_VENDORS_VLLM


def host_tier_mib(spec: LLMModelSpec, *, llama_server: bool = False) -> int:
    """The tier's size in MiB: declared, else llama.cpp's default or off (0)."""
    if not has_tier(spec, llama_server=llama_server):
        return 0
    declared = spec.kv_cache.host_memory_mib if spec.kv_cache else None
    if declared is not None:
        return declared
    return 0 if spec.inference_engine == "vllm" else DEFAULT_LLAMACPP_MIB


def llama_server_tier_args(spec: LLMModelSpec) -> list[str]:
    """``--cache-ram`` always: llama-server's 8 GiB default never applies unseen."""
    return ["--cache-ram", str(host_tier_mib(spec, llama_server=True))]


def vllm_tier_args(spec: LLMModelSpec) -> list[str]:
    """The native offloading connector of vLLM at the tier's size (GiB), where it has one."""
    mib = host_tier_mib(spec)
    if mib == 0:
        return []
    return ["--kv-offloading-backend", "native", "--kv-offloading-size", _gib(mib)]


def _gib(mib: int) -> str:
    text = f"{mib / 1024:.3f}".rstrip("0").rstrip(".")
    return text or "0"


def memory_quantity(spec: LLMModelSpec) -> str:
    """The inference pod's memory request and limit: resources.memoryGiB and the tier."""
    return mib_quantity(spec.resources.memory_gi_b * 1024 + host_tier_mib(spec))


def status_quantity(spec: LLMModelSpec) -> str | None:
    """The tier as status reports it ("256Mi", "0": off), None for an engine without one."""
    return mib_quantity(host_tier_mib(spec)) if has_tier(spec) else None


def pool_tier_mib(specs: Sequence[LLMModelSpec], loaded: int | None = None) -> int:
    """The host tiers a pool's engine may hold at once: the ``loaded`` largest (None: all).

    A llama.cpp pool runs a llama-server per loaded member, each with its own --cache-ram;
    a vLLM pool runs every member's engine, asleep or awake.
    """
    tiers = sorted((host_tier_mib(spec) for spec in specs), reverse=True)
    return sum(tiers if loaded is None else tiers[:loaded])
