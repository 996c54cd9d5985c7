"""Capacity planner: estimate a model's memory, check it fits, recommend accelerator count."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from llm_operator.api import vllm_cpu
from llm_operator.api.gpu_rules import mig_profile
from llm_operator.api.mig import mig_card, profile_memory_gib
from llm_operator.api.serving import GPU_VENDORS, MAX_NODES, MULTI_NODE_ENGINES, ROLES
from llm_operator.api.serving_rules import asked_nodes
from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.profiles.adapters import adapter_memory
from llm_operator.profiles.engines import TP_ARGS, engine
from llm_operator.profiles.estimate import (
    DEFAULT_CONTEXT_TOKENS,
    Estimate,
    cache_size_gib,
    estimate_from_file,
    estimate_memory,
)
from llm_operator.profiles.kv_tier import host_tier_mib
from llm_operator.profiles.llamaserver import parallel_slots
from llm_operator.profiles.vendors import VENDORS, Accelerator, VendorProfile, vendor

Verdict = Literal["fits", "tight", "does-not-fit"]

GPU_UTILIZATION_DEFAULT = 0.90  # vLLM's --gpu-memory-utilization default
# The engineArg that sets the share of accelerator memory an engine takes (SGLang's default
# depends on the card; 0.9 is its documented one).
UTILIZATION_ARG = {"vllm": "gpu-memory-utilization", "sglang": "mem-fraction-static"}
GGUF_GPU_UTILIZATION = 0.95
HEADROOM = 0.85  # above this share of usable memory the verdict is "tight"
COUNTS = (1, 2, 4, 8)  # tensor-parallel degrees that fit in one node
AMD_MX_CARDS = ("AMD Instinct MI350X",)


@dataclass(frozen=True)
class Plan:
    """The planner's verdict for one model."""

    name: str
    mode: str
    verdict: Verdict
    reason: str
    estimate: Estimate | None = None
    capacity_gib: float | None = None
    accelerator: str | None = None
    accelerator_count: int = 0  # per node
    tensor_parallel_size: int = 1
    cache_size_gib: int = 0
    nodes: int = 1  # more than 1: tensor parallel in each node, pipeline parallel across
    pipeline_parallel_size: int = 1
    field: str = "spec.resources"  # the spec field a does-not-fit verdict asks to change
    host_tier_mib: int = 0  # the host KV tier, in the pod's memory on top of memoryGiB

    @property
    def estimated_memory_gib(self) -> float:
        return round(self.estimate.total_gib, 1) if self.estimate else 0.0

    def to_dict(self) -> dict[str, Any]:
        est = self.estimate
        return {
            "name": self.name,
            "mode": self.mode,
            "estimatedMemoryGiB": self.estimated_memory_gib,
            "weightsGiB": round(est.weights_gib, 1) if est else 0.0,
            "kvCacheGiB": round(est.kv_cache_gib, 1) if est else 0.0,
            "overheadGiB": round(est.overhead_gib, 1) if est else 0.0,
            "adaptersGiB": round(est.adapters_gib, 2) if est else 0.0,
            "contextTokens": est.context_tokens if est else 0,
            "capacityGiB": round(self.capacity_gib, 1) if self.capacity_gib else None,
            "accelerator": self.accelerator,
            "acceleratorCount": self.accelerator_count,
            "tensorParallelSize": self.tensor_parallel_size,
            "nodes": self.nodes,
            "pipelineParallelSize": self.pipeline_parallel_size,
            "cacheSizeGiB": self.cache_size_gib,
            "hostKvCacheMiB": self.host_tier_mib,
            "verdict": self.verdict,
            "reason": self.reason,
        }


def utilization(spec: LLMModelSpec) -> float:
    """The share of accelerator memory the engine takes (its engineArg, else its default)."""
    if spec.inference_engine not in UTILIZATION_ARG:
        return GGUF_GPU_UTILIZATION
    raw = (spec.engine_args or {}).get(UTILIZATION_ARG[spec.inference_engine])
    try:
        value = float(raw) if raw is not None else GPU_UTILIZATION_DEFAULT
    except ValueError:
        return GPU_UTILIZATION_DEFAULT
    return value if 0 < value <= 1 else GPU_UTILIZATION_DEFAULT


def _card_of_other_vendor(text: str | None, own: str) -> tuple[str, Accelerator] | None:
    for name, profile in VENDORS.items():
        card = profile.find_accelerator(text)
        if name != own and card is not None:
            return name, card
    return None


def _needed_count(total: float, per_card: float, util: float) -> int | None:
    return next((n for n in COUNTS if total <= per_card * n * util), None)


def plan(model: LLMModel, min_cache_gib: int = 20) -> Plan:
    """Plan one model: its memory estimate against what its spec asks for.

    Once the model file's header is known (``status.model``, GGUF models), the verdict uses
    the file's real size and shape; the cache volume keeps its size from the spec (a
    volume is not resized under a running model).
    """
    spec, name = model.spec, model.name
    if spec.is_remote:
        host = urlsplit(spec.remote_api.base_url).hostname if spec.remote_api else "?"
        return Plan(name, "remote", "fits",
                    f"remote model served by {host}: no accelerator memory needed")
    eng = engine(spec.inference_engine)
    # KV cache for every llama.cpp slot: each holds a full context
    context = (eng.served_context_tokens(spec) or DEFAULT_CONTEXT_TOKENS) * parallel_slots(spec)
    vp = vendor(spec.accelerator_vendor)
    on_accel = vp.resource_key is not None
    est = estimate_memory(spec.total_parameters_billions or 0.0, spec.active_parameters_billions,
                          spec.quantization, context, on_accelerator=on_accel,
                          gguf_engine=eng.gguf_only)
    cache = cache_size_gib(est, min_cache_gib)
    file = model.status.model if model.status else None
    measured = estimate_from_file(file, context, on_accelerator=on_accel,
                                  slots=parallel_slots(spec),
                                  gguf_engine=eng.gguf_only) if file else None
    lora = adapter_memory(spec, file.embedding_length if measured and file else None,
                          file.layers if measured and file else None)
    chosen = replace(measured or est, adapters_gib=lora.gib if lora else 0.0)
    result = replace(_plan_local(model, chosen, cache, vp, on_accel),
                     host_tier_mib=host_tier_mib(spec))
    notes = []
    if lora is not None:
        notes.append(f"LoRA adapters {lora.gib:.2f} GiB: {lora.slots} at rank {lora.rank}")
    if measured is not None and file is not None:
        notes.append(f"sized from {file.file}'s header")
    return replace(result, reason=f"{result.reason} ({'; '.join(notes)})") if notes else result


def _plan_local(model: LLMModel, est: Estimate, cache: int, vp: VendorProfile,
                on_accel: bool) -> Plan:
    spec, name = model.spec, model.name
    need = est.total_gib
    if not on_accel:
        if spec.inference_engine == "vllm":
            return _plan_vllm_cpu(name, spec, est, cache)
        return _plan_cpu(name, spec, est, cache)

    util = utilization(spec)
    count = spec.resources.accelerator_count
    declared = spec.resources.vram_per_accelerator_gi_b
    preferred = spec.resources.preferred_accelerator_model
    card = vp.find_accelerator(preferred)
    base = Plan(name, "local", "fits", "", estimate=est, cache_size_gib=cache,
                accelerator_count=count)
    if spec.llama_cpp and spec.llama_cpp.mlock and est.weights_gib > spec.resources.memory_gi_b:
        return replace(base, verdict="does-not-fit", reason=(
            f"llamaCpp.mlock pins the ~{est.weights_gib:.1f} GiB of weights in RAM but "
            f"resources.memoryGiB is {spec.resources.memory_gi_b}: raise it to "
            f"{math.ceil(est.weights_gib / HEADROOM)} or turn mlock off"))

    other = _card_of_other_vendor(preferred, vp.name) if card is None else None
    if other is not None:
        return replace(base, verdict="does-not-fit", reason=(
            f"preferredAcceleratorModel {preferred!r} is an {other[0]} accelerator but "
            f"acceleratorVendor is {vp.name}"))
    if spec.quantization.startswith("MX") and vp.name == "amd" and card is not None \
            and card.name not in AMD_MX_CARDS:
        return replace(base, verdict="does-not-fit", reason=(
            f"{spec.quantization} needs an AMD MI350X or later (CDNA 4); {card.name} "
            "cannot run it: use FP8 or AWQ"))

    profile = mig_profile(spec)
    if profile is not None:
        return _plan_mig(base, spec, need, profile, util)
    per_card = card.memory_gib if card else declared
    if not per_card:
        largest = vp.largest_accelerator
        n = (_needed_count(need, largest.memory_gib, util) if largest else None) or count
        return replace(base, verdict="tight", accelerator_count=n,
                       tensor_parallel_size=_tp(spec, n), reason=(
                           f"needs ~{need:.1f} GiB but neither vramPerAcceleratorGiB nor a known "
                           "preferredAcceleratorModel says how much memory a card has: set one"))

    label = card.name if card else f"{per_card} GiB accelerator"
    roles = spec.serving.disaggregation if spec.serving else None
    if roles is not None:
        return _plan_roles(base, spec, need, _Cards(per_card, util, label))
    needed = _needed_count(need, per_card, util)
    recommended = needed or count
    usable = per_card * count * util
    base = replace(base, capacity_gib=usable, accelerator=label, accelerator_count=recommended,
                   tensor_parallel_size=_tp(spec, recommended))
    named = _tp_arg(spec)
    if named is not None and named[1].isdigit() and int(named[1]) > count:
        return replace(base, verdict="does-not-fit", reason=(
            f"engineArgs {named[0]} {named[1]} needs {named[1]} accelerators "
            f"but resources.acceleratorCount is {count}"))
    asked = spec.serving.nodes if spec.serving else None
    if (asked or 1) > 1 or (asked is None and needed is None and need > usable
                            and _multi_node_capable(spec)):
        return _plan_nodes(base, spec, need, _Cards(per_card, util, label), asked)
    if need > usable:
        field = base.field
        if needed is None:
            fix = (f"more than {COUNTS[-1]}x {label} (one node): use a smaller quantization or "
                   "context, or a larger accelerator")
            if spec.inference_engine not in UTILIZATION_ARG:
                fix += " (llama.cpp and Ollama serve a model on one node)"
            elif asked == 1:
                nodes = _fewest_nodes(spec, math.ceil(need / usable))
                fix = (f"more than one node: set serving.nodes: {nodes}, or remove it and let "
                       "the planner pick")
                field = "spec.serving.nodes"
        else:
            fix = f"set resources.acceleratorCount: {needed} (tensor-parallel {needed})"
            field = "spec.resources.acceleratorCount"
        return replace(base, verdict="does-not-fit", field=field, reason=(
            f"needs ~{need:.1f} GiB but {count}x {label} at {util:.0%} gives "
            f"{usable:.1f} GiB: {fix}"))
    return _headroom(base, spec, need, usable, where=f"{count}x {label}",
                     known_card=card is not None)


def _plan_mig(base: Plan, spec: LLMModelSpec, need: float, profile: str, util: float
              ) -> Plan:
    """One MIG instance: the model against the instance's memory (the rules checked the card)."""
    card = mig_card(spec.resources.preferred_accelerator_model)
    label = f"MIG {profile} of {card.name if card else 'the card'}"
    usable = profile_memory_gib(profile) * util
    base = replace(base, capacity_gib=usable, accelerator=label, accelerator_count=1,
                   tensor_parallel_size=1)
    if need <= usable:
        return _headroom(base, spec, need, usable, where=label, known_card=False)
    larger = sorted((p for p in (card.profiles if card else ()) if "+" not in p
                     and need <= profile_memory_gib(p) * util),
                    key=lambda p: (profile_memory_gib(p), p))
    fix = f"use migProfile {larger[0]}" if larger else \
        "it needs more than a whole card: use whole GPUs (remove gpuSharing)"
    return replace(base, verdict="does-not-fit", field="spec.resources.gpuSharing.migProfile",
                   reason=f"needs ~{need:.1f} GiB but {label} at {util:.0%} gives "
                   f"{usable:.1f} GiB: {fix}")


@dataclass(frozen=True)
class _Cards:
    """The card a model is planned on: its memory, the share the engine takes, its name."""

    memory_gib: float
    utilization: float
    label: str

    def usable(self, count: int) -> float:
        return self.memory_gib * count * self.utilization


def _headroom(base: Plan, spec: LLMModelSpec, need: float, usable: float, *, where: str,
              known_card: bool) -> Plan:
    """The verdict for a model that fits: tight under the headroom or past the declared VRAM."""
    count = max(1, base.accelerator_count)
    per_accel = need / (count * base.nodes)
    declared = spec.resources.vram_per_accelerator_gi_b
    if known_card and declared and per_accel > declared:
        return replace(base, verdict="tight", reason=(
            f"fits {where} ({need:.1f} of {usable:.1f} GiB) but needs "
            f"~{per_accel:.1f} GiB per accelerator, above the declared "
            f"vramPerAcceleratorGiB {declared}: raise it to {math.ceil(per_accel)}"))
    if need > HEADROOM * usable:
        return replace(base, verdict="tight", reason=(
            f"{need:.1f} of {usable:.1f} GiB usable on {where}: under "
            f"{1 - HEADROOM:.0%} headroom for batching"))
    return replace(base, reason=f"{need:.1f} of {usable:.1f} GiB usable on {where}")


def _multi_node_capable(spec: LLMModelSpec) -> bool:
    """Whether the engine and vendor serve one replica across nodes (a LeaderWorkerSet)."""
    return spec.inference_engine in MULTI_NODE_ENGINES and spec.accelerator_vendor in GPU_VENDORS


def _topology(spec: LLMModelSpec, count: int, nodes: int) -> tuple[int, int, str]:
    """(tensor, pipeline, words) of one replica over ``nodes`` nodes of ``count`` cards.

    vLLM: tensor parallel inside each node, pipeline parallel across (its documented shape);
    SGLang: tensor parallel over every card of every node (its --nnodes shape).
    """
    if spec.inference_engine == "sglang":
        return count * nodes, 1, f"tensor-parallel {count * nodes} over {nodes} nodes"
    return count, nodes, f"tensor-parallel {count} x pipeline-parallel {nodes}"


def _fewest_nodes(spec: LLMModelSpec, holding: int) -> int:
    """The fewest nodes to ask for when ``holding`` nodes hold the model.

    SGLang splits tensor parallel over every card of every node, and a tensor-parallel size
    must divide the model's attention heads: powers of two in the models it serves (SGLang's
    own hardware table puts DeepSeek V3 at BF16 on 4 x 8 H100, not 3). vLLM's pipeline
    stages split layers, which any count does.
    """
    if spec.inference_engine == "sglang":
        return 1 << (holding - 1).bit_length()
    return holding


def _plan_nodes(base: Plan, spec: LLMModelSpec, need: float, cards: _Cards,
                asked: int | None) -> Plan:
    """One replica across nodes: serving.nodes, or the fewest nodes that hold the model."""
    count, label, util = spec.resources.accelerator_count, cards.label, cards.utilization
    per_node = cards.usable(count)
    holding = math.ceil(need / per_node)
    fewest = _fewest_nodes(spec, holding)
    nodes = asked or fewest
    tensor, pipeline, words = _topology(spec, count, nodes)
    if nodes > holding and asked is None:
        words += f"; {holding} would hold it, {nodes} so that it divides the attention heads"
    usable = per_node * nodes
    where = f"{nodes} nodes of {count}x {label} ({words}, a LeaderWorkerSet)"
    shaped = replace(base, capacity_gib=usable, accelerator_count=count,
                     tensor_parallel_size=tensor, nodes=nodes, pipeline_parallel_size=pipeline,
                     field="spec.serving.nodes" if asked else base.field)
    if not _multi_node_capable(spec):  # the CRD refuses it too; a parse without rules may not
        return replace(shaped, verdict="does-not-fit", reason=(
            "a model served across nodes (serving.nodes) needs inferenceEngine vllm or sglang "
            "on acceleratorVendor nvidia or amd"))
    if holding > MAX_NODES:
        return replace(shaped, verdict="does-not-fit", reason=(
            f"needs ~{need:.1f} GiB; one node of {count}x {label} gives {per_node:.1f} GiB at "
            f"{util:.0%}, so {holding} nodes, more than the {MAX_NODES} one replica may span: use "
            "a smaller quantization or context, more accelerators per node, or a larger one"))
    if need > usable:
        return replace(shaped, verdict="does-not-fit", reason=(
            f"needs ~{need:.1f} GiB but serving.nodes {nodes} x {count}x {label} at {util:.0%} "
            f"gives {usable:.1f} GiB: set serving.nodes: {fewest}"))
    verdict = _headroom(shaped, spec, need, usable, where=where, known_card=True)
    divisible = _fewest_nodes(spec, nodes)  # nodes itself, unless SGLang's TP would not divide
    if verdict.verdict == "fits" and divisible != nodes:
        return replace(verdict, verdict="tight", reason=(
            f"{verdict.reason}; SGLang's tensor-parallel {tensor} must divide the model's "
            f"attention heads, a power of two in most models: check it, or set serving.nodes: "
            f"{divisible}"))
    return verdict


def _plan_roles(base: Plan, spec: LLMModelSpec, need: float, cards: _Cards) -> Plan:
    """Prefill and decode pods each hold the whole model: each role's cards must fit it."""
    counts = {role: spec.role_resources(role).accelerator_count for role in ROLES}
    smallest, label, util = min(counts.values()), cards.label, cards.utilization
    usable = cards.usable(smallest)
    shaped = replace(base, capacity_gib=usable, accelerator=label,
                     accelerator_count=counts["decode"],
                     tensor_parallel_size=_tp(spec, counts["decode"]))
    for name, count in counts.items():
        if need > cards.usable(count):
            needed = _needed_count(need, cards.memory_gib, util)
            fix = (f"set serving.disaggregation.{name}.resources.acceleratorCount: {needed}"
                   if needed else f"more than {COUNTS[-1]}x {label}: a role serves on one node")
            return replace(shaped, verdict="does-not-fit", field=(
                f"spec.serving.disaggregation.{name}.resources.acceleratorCount"), reason=(
                f"needs ~{need:.1f} GiB but the {name} role's {count}x {label} at {util:.0%} "
                f"gives {cards.usable(count):.1f} GiB: {fix}"))
    where = (f"prefill {counts['prefill']}x and decode {counts['decode']}x {label} "
             f"(each role holds the model)")
    return _headroom(replace(shaped, accelerator_count=smallest), spec, need, usable,
                     where=where, known_card=True)


def _tp_arg(spec: LLMModelSpec) -> tuple[str, str] | None:
    """The engineArg that sets tensor parallelism, and its value, if any."""
    args = spec.engine_args or {}
    return next(((k, args[k]) for k in TP_ARGS if k in args), None)


def _tp(spec: LLMModelSpec, count: int) -> int:
    if spec.inference_engine not in UTILIZATION_ARG:
        return 1
    named = _tp_arg(spec)
    return int(named[1]) if named and named[1].isdigit() else count


def _plan_cpu(name: str, spec: LLMModelSpec, est: Estimate, cache: int) -> Plan:
    memory = spec.resources.memory_gi_b
    need = est.total_gib
    base = Plan(name, "local", "fits", f"{need:.1f} of {memory} GiB RAM", estimate=est,
                capacity_gib=float(memory), cache_size_gib=cache)
    if need > memory:
        return replace(base, verdict="does-not-fit", reason=(
            f"needs ~{need:.1f} GiB of RAM but resources.memoryGiB is {memory}: raise it "
            f"to {math.ceil(need / HEADROOM)} or lower the context"))
    if need > HEADROOM * memory:
        return replace(base, verdict="tight", reason=(
            f"{need:.1f} of {memory} GiB RAM: under {1 - HEADROOM:.0%} headroom"))
    return base


def _plan_vllm_cpu(name: str, spec: LLMModelSpec, est: Estimate, cache: int) -> Plan:
    """VLLM on CPU: 16-bit weights, its runtime and the fixed KV space it is given.

    The KV space (VLLM_CPU_KVCACHE_SPACE) is what memoryGiB leaves; vLLM refuses to start
    when one full context does not fit in it, which the estimate can only approximate.
    Across serving.nodes pods (pipeline parallel, vLLM's multiprocessing backend) each pod
    holds its share of the weights beside a runtime and a KV space of its own; the figures
    are one pod's.
    """
    memory = spec.resources.memory_gi_b
    params = spec.total_parameters_billions or 0.0
    nodes = asked_nodes(spec)
    space = vllm_cpu.kv_cache_space_gib(params, memory, nodes)
    sized = replace(est, weights_gib=vllm_cpu.weights_gib(params, nodes),
                    overhead_gib=vllm_cpu.runtime_gib(params, nodes), kv_cache_gib=float(space))
    where = f" in each of {nodes} pods" if nodes > 1 else ""
    shape = f" (pipeline-parallel {nodes}, a LeaderWorkerSet)" if nodes > 1 else ""
    base = Plan(name, "local", "fits", (
        f"{sized.total_gib:.1f} of {memory} GiB RAM{where}{shape}: {sized.weights_gib:.1f} GiB of "
        f"16-bit weights, {sized.overhead_gib:.1f} GiB of runtime, {space} GiB of KV cache "
        "(VLLM_CPU_KVCACHE_SPACE)"), estimate=sized, capacity_gib=float(memory),
        cache_size_gib=cache, nodes=nodes, pipeline_parallel_size=nodes)
    floor = vllm_cpu.memory_floor_gib(params, nodes)
    if memory < floor:
        return replace(base, verdict="does-not-fit", field="spec.resources.memoryGiB", reason=(
            f"needs ~{floor:.1f} GiB of RAM{where} but resources.memoryGiB is {memory}: "
            f"{vllm_cpu.MEMORY_MESSAGE.partition(': ')[2]}"))
    kv = est.kv_cache_gib / nodes  # a pod holds the KV cache of its own layers
    if kv > space:
        return replace(base, verdict="tight", reason=(
            f"a full {est.context_tokens}-token context needs ~{kv:.1f} GiB of KV cache{where} "
            f"but {space} GiB is left (VLLM_CPU_KVCACHE_SPACE): vLLM refuses to start "
            f"if it cannot hold one; raise resources.memoryGiB to "
            f"{math.ceil(floor - 1 + kv)} or lower the context"))
    return base
