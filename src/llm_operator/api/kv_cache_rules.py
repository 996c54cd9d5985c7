"""The rules of spec.kvCache (CEL and Python): a size with its unit, on an engine with a tier."""

from __future__ import annotations

from llm_operator.api.kv_cache import quantity_bytes
from llm_operator.api.rule import ENGINE, VENDOR, Rule, is_local
from llm_operator.api.v1alpha1 import LLMModelSpec

# The engines and vendors the operator gives a host tier (profiles/kv_tier.py).
TIER_VENDORS_VLLM = ("nvidia", "amd")
DECLARED = ("has(self.kvCache) && has(self.kvCache.hostMemory) && "
            "string(self.kvCache.hostMemory) != '0'")


def declared(spec: LLMModelSpec) -> bool:
    """Whether the spec asks for a tier of some size (0 asks for none)."""
    kv = spec.kv_cache
    return kv is not None and kv.host_memory is not None \
        and quantity_bytes(kv.host_memory) > 0


def _vllm_on_cpu(spec: LLMModelSpec) -> bool:
    return is_local(spec) and spec.inference_engine == "vllm" \
        and spec.accelerator_vendor == "cpu"


def _without_tier(spec: LLMModelSpec) -> bool:
    """An engine with no tier the operator sets (vLLM on CPU has its own rule)."""
    if not is_local(spec):
        return True
    if spec.inference_engine == "vllm":
        return spec.accelerator_vendor not in (*TIER_VENDORS_VLLM, "cpu")
    return spec.inference_engine != "llamacpp"


KV_CACHE_RULES: tuple[Rule, ...] = (
    Rule(
        id="kv-cache-size-with-unit",
        location="spec.kvCache",
        field=".hostMemory",
        cel="!has(self.hostMemory) || type(self.hostMemory) == string || "
        "self.hostMemory == 0",
        message="kvCache.hostMemory: a bare number counts bytes; write the size with its "
        "unit, such as 512Mi or 2Gi (0 turns the tier off)",
        holds=lambda kv: not isinstance(kv.host_memory, int) or kv.host_memory == 0,
    ),
    Rule(
        id="kv-cache-vllm-cpu",
        location="spec",
        field=".kvCache.hostMemory",
        cel=f"!({DECLARED}) || self.deploymentMode != 'local' || {ENGINE} != 'vllm' || "
        f"{VENDOR} != 'cpu'",
        message="kvCache.hostMemory: vLLM on acceleratorVendor cpu already keeps its whole "
        "KV cache in host memory, sized by resources.memoryGiB: remove hostMemory (or set "
        "0) and raise memoryGiB for a larger cache",
        holds=lambda s: not (declared(s) and _vllm_on_cpu(s)),
    ),
    Rule(
        id="kv-cache-disaggregation",
        location="spec",
        field=".kvCache.hostMemory",
        cel=f"!({DECLARED}) || !has(self.serving) || !has(self.serving.disaggregation)",
        message="kvCache.hostMemory: prefill and decode pods hand the KV cache over with "
        "vLLM's NIXL connector, which its KV offloading would replace: remove hostMemory "
        "(or set 0), or serve without serving.disaggregation",
        holds=lambda s: not (declared(s) and s.serving is not None
                             and s.serving.disaggregation is not None),
    ),
    Rule(
        id="kv-cache-engine",
        location="spec",
        field=".kvCache.hostMemory",
        cel=f"!({DECLARED}) || (self.deploymentMode == 'local' && ({ENGINE} == 'llamacpp' "
        f"|| ({ENGINE} == 'vllm' && {VENDOR} in {[*TIER_VENDORS_VLLM, 'cpu']})))",
        message="kvCache.hostMemory: a host tier is set for llama.cpp (its prompt cache) "
        "and for vLLM on nvidia or amd (KV offloading); Ollama, SGLang, vLLM on "
        "intel-gaudi and remote models have none the operator sets: remove it or set 0",
        holds=lambda s: not (declared(s) and _without_tier(s)),
    ),
)

