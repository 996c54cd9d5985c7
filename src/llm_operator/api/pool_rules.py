"""The rules of spec.pool on one model (CEL and Python); pools/ checks across members."""

from __future__ import annotations

from llm_operator.api.pool import POOL_ENGINES, SLEEP_MODE_VENDORS
from llm_operator.api.rule import ENGINE, VENDOR, Rule, is_local
from llm_operator.api.v1alpha1 import LLMModelSpec

POOLED = "has(self.pool)"


def _pooled(spec: LLMModelSpec) -> bool:
    return spec.pool is not None


POOL_RULES: tuple[Rule, ...] = (
    Rule(
        id="pool-for-local-models",
        location="spec",
        field=".pool",
        cel=f"!{POOLED} || self.deploymentMode == 'local'",
        message="pool applies to local models: a remote model is served by its provider",
        holds=lambda s: not _pooled(s) or is_local(s),
    ),
    Rule(
        id="pool-engine",
        location="spec",
        field=".inferenceEngine",
        cel=f"!{POOLED} || self.deploymentMode != 'local' || {ENGINE} in {list(POOL_ENGINES)}",
        message="a pool is served by llama.cpp's router mode, which loads and unloads its "
        "members, or by vLLM engines taking turns on one accelerator (sleep mode): set "
        "inferenceEngine llamacpp or vllm, or remove pool",
        holds=lambda s: not _pooled(s) or not is_local(s) or s.inference_engine in POOL_ENGINES,
    ),
    Rule(
        id="pool-vllm-sleep-mode",
        location="spec",
        field=".acceleratorVendor",
        cel=f"!{POOLED} || {ENGINE} != 'vllm' || {VENDOR} in {list(SLEEP_MODE_VENDORS)}",
        message="a vLLM pool's members take turns on one accelerator with vLLM's sleep mode, "
        "which runs on CUDA and ROCm: set acceleratorVendor nvidia or amd, or serve the "
        "pool with inferenceEngine llamacpp",
        holds=lambda s: not _pooled(s) or s.inference_engine != "vllm"
        or s.accelerator_vendor in SLEEP_MODE_VENDORS,
    ),
    Rule(
        id="pool-llamacpp-on-cpu",
        location="spec",
        field=".acceleratorVendor",
        cel=f"!{POOLED} || self.deploymentMode != 'local' || {ENGINE} != 'llamacpp' || "
        f"{VENDOR} == 'cpu'",
        message="a llama.cpp pool runs on the CPU: its pod asks for no GPU and offloads no "
        "layer, so on nvidia or amd its members would run on the CPU unseen; set "
        "acceleratorVendor cpu, serve the GPU pool with inferenceEngine vllm (sleep mode), "
        "or take the model out of the pool",
        holds=lambda s: not _pooled(s) or not is_local(s) or s.inference_engine != "llamacpp"
        or s.accelerator_vendor == "cpu",
    ),
    Rule(
        id="pool-idle-llamacpp",
        location="spec",
        field=".pool.idleSeconds",
        cel=f"!{POOLED} || !has(self.pool.idleSeconds) || {ENGINE} == 'llamacpp'",
        message="pool.idleSeconds unloads an idle member of a llama.cpp pool; a vLLM pool's "
        "members already sleep when another needs the accelerator: remove idleSeconds",
        holds=lambda s: not _pooled(s) or s.pool is None or s.pool.idle_seconds is None
        or s.inference_engine == "llamacpp",
    ),
    Rule(
        id="pool-pinned-not-idle",
        location="spec",
        field=".pool.pinned",
        cel=f"!{POOLED} || !has(self.pool.pinned) || !self.pool.pinned || "
        "!has(self.pool.idleSeconds)",
        message="a pinned member stays loaded, and idleSeconds would unload it when idle: "
        "remove idleSeconds, or pinned",
        holds=lambda s: s.pool is None or not s.pool.pinned or s.pool.idle_seconds is None,
    ),
    Rule(
        id="pool-one-pod",
        location="spec",
        field=".serving",
        cel=f"!{POOLED} || !has(self.serving)",
        message="a pooled model is served by the pool's engine, one pod per replica: remove "
        "serving, or take the model out of the pool",
        holds=lambda s: not _pooled(s) or s.serving is None,
    ),
    Rule(
        id="pool-no-adapters",
        location="spec",
        field=".loraAdapters",
        cel=f"!{POOLED} || !has(self.loraAdapters) || size(self.loraAdapters) == 0",
        message="LoRA adapters are not served from a pool: give the adapted model its own "
        "LLMModel without pool, or remove loraAdapters",
        holds=lambda s: not _pooled(s) or not s.lora_adapters,
    ),
)
