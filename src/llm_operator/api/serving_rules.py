"""The rules of spec.serving: nodes per replica, and prefill/decode roles (CEL and Python)."""

from __future__ import annotations

from collections.abc import Callable

from llm_operator.api.rule import ENGINE, VENDOR, Rule, is_local
from llm_operator.api.serving import (
    CPU_MULTI_NODE_ENGINE,
    DISAGGREGATED_ENGINE,
    GPU_VENDORS,
    MULTI_NODE_ENGINES,
    ROLES,
    DisaggregationSpec,
)
from llm_operator.api.v1alpha1 import LLMModelSpec

NODES_ASKED = "(has(self.serving) && has(self.serving.nodes) && self.serving.nodes > 1)"
DISAGGREGATED = "(has(self.serving) && has(self.serving.disaggregation))"


def asked_nodes(spec: LLMModelSpec) -> int:
    """serving.nodes as asked (1 when unset: the planner may still pick more)."""
    return (spec.serving.nodes if spec.serving else None) or 1


def _disaggregation(spec: LLMModelSpec) -> DisaggregationSpec | None:
    return spec.serving.disaggregation if spec.serving else None


def _on_gpus(rule_id: str, field: str, asked_cel: str, asked: Callable[[LLMModelSpec], bool],
             what: str) -> Rule:
    """``what`` (a shape of spec.serving, asked for when ``asked``) runs on GPUs only."""
    return Rule(
        id=rule_id, location="spec", field=field,
        cel=f"!{asked_cel} || {VENDOR} in {list(GPU_VENDORS)}",
        message=f"{what} ({field.lstrip('.')}) needs acceleratorVendor "
        f"{' or '.join(GPU_VENDORS)}",
        holds=lambda s: not asked(s) or s.accelerator_vendor in GPU_VENDORS,
    )


SERVING_RULES: tuple[Rule, ...] = (
    Rule(
        id="serving-for-local-models",
        location="spec",
        field=".serving",
        cel="!has(self.serving) || self.deploymentMode == 'local'",
        message="serving applies to local models: a remote model is served by its provider",
        holds=lambda s: s.serving is None or is_local(s),
    ),
    Rule(
        id="multi-node-engines",
        location="spec",
        field=".serving.nodes",
        cel=f"!{NODES_ASKED} || {ENGINE} in {list(MULTI_NODE_ENGINES)}",
        message="a model served across nodes (serving.nodes) needs inferenceEngine vllm or "
        "sglang; llama.cpp and Ollama serve a model on one node",
        holds=lambda s: asked_nodes(s) <= 1 or s.inference_engine in MULTI_NODE_ENGINES,
    ),
    Rule(
        id="multi-node-vendors",
        location="spec",
        field=".serving.nodes",
        cel=f"!{NODES_ASKED} || {VENDOR} in {list(GPU_VENDORS)} || "
        f"({VENDOR} == 'cpu' && {ENGINE} == '{CPU_MULTI_NODE_ENGINE}')",
        message="a model served across nodes (serving.nodes) needs acceleratorVendor "
        f"{' or '.join(GPU_VENDORS)}, or cpu with inferenceEngine {CPU_MULTI_NODE_ENGINE}",
        holds=lambda s: asked_nodes(s) <= 1 or s.accelerator_vendor in GPU_VENDORS or (
            s.accelerator_vendor == "cpu" and s.inference_engine == CPU_MULTI_NODE_ENGINE),
    ),
    Rule(
        id="disaggregation-vllm",
        location="spec",
        field=".serving.disaggregation",
        cel=f"!{DISAGGREGATED} || {ENGINE} == '{DISAGGREGATED_ENGINE}'",
        message="prefill/decode disaggregation (serving.disaggregation) needs inferenceEngine "
        "vllm (the roles hand over the KV cache with vLLM's NIXL connector)",
        holds=lambda s: _disaggregation(s) is None or s.inference_engine == DISAGGREGATED_ENGINE,
    ),
    _on_gpus("disaggregation-gpus", ".serving.disaggregation", DISAGGREGATED,
             lambda s: _disaggregation(s) is not None, "prefill/decode disaggregation"),
    Rule(
        id="disaggregation-on-one-node",
        location="spec",
        field=".serving.nodes",
        cel=f"!{DISAGGREGATED} || !{NODES_ASKED}",
        message="a disaggregated model's roles each serve on one node: remove serving.nodes "
        "or serving.disaggregation",
        holds=lambda s: _disaggregation(s) is None or asked_nodes(s) <= 1,
    ),
    Rule(
        id="distributed-without-lora",
        location="spec",
        field=".loraAdapters",
        cel=f"!has(self.loraAdapters) || size(self.loraAdapters) == 0 || "
        f"(!{DISAGGREGATED} && !{NODES_ASKED})",
        message="loraAdapters are served by one-pod replicas: remove them, or remove "
        "serving.nodes and serving.disaggregation",
        holds=lambda s: not s.lora_adapters or (_disaggregation(s) is None and asked_nodes(s) <= 1),
    ),
    *(Rule(
        id=f"{role}-replicas",
        location=f"spec.serving.disaggregation.{role}",
        field=".replicas",
        cel="!has(self.replicas) || self.replicas >= 1",
        message=f"serving.disaggregation.{role}.replicas must be at least 1; to serve without "
        "separate roles remove serving.disaggregation",
        holds=lambda r: r.replicas >= 1,
    ) for role in ROLES),
)
