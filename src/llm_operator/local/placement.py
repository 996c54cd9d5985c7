"""What `llmop up` does with each model on this machine: serve, proxy, or say why not."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.api.pools import pools
from llm_operator.api.references import declared, unknown_guard_models
from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec
from llm_operator.api.validation import Problem
from llm_operator.profiles.estimate import DEFAULT_CONTEXT_TOKENS, GIB, estimate_from_file
from llm_operator.profiles.kv_tier import host_tier_mib, pool_tier_mib
from llm_operator.profiles.llama_router import Member, models_preset
from llm_operator.profiles.llamaserver import Where, llama_server_args, parallel_slots
from llm_operator.profiles.planner import plan
from llm_operator.profiles.pool import across_pools, plan_pool
from llm_operator.render.remote import gateway_route

LOCAL_ENGINES = ("llamacpp", "ollama")
LOOPBACK = "127.0.0.1"

# `llmop up` runs llama-server processes only: vLLM's CPU build (several GiB of torch, ~4 GiB
# of RAM beside the weights, a minute of compiling) runs in its image, in a cluster.
VLLM_ON_CPU = ("inferenceEngine vllm on the CPU runs in a cluster (vLLM's CPU image); "
               "`llmop up` serves GGUF files with llama.cpp: add a variant with inferenceEngine "
               "llamacpp and a GGUF quantization")
VENDOR_NAMES = {"nvidia": "NVIDIA GPU", "amd": "AMD GPU", "intel-gaudi": "Intel Gaudi card"}

Kind = Literal["skipped", "unplaceable", "clash"]


@dataclass(frozen=True)
class Machine:
    """What this machine offers: CPU cores, RAM and the accelerator vendors present."""

    cpus: int
    memory_gib: float
    accelerators: frozenset[str] = frozenset()
    available_gib: float | None = None  # free at start (MemAvailable); None: unknown

    @property
    def free_gib(self) -> float:
        return self.memory_gib if self.available_gib is None else self.available_gib


@dataclass(frozen=True)
class LocalServe:
    """A llama-server process on this machine's ``cores``, and the engineArgs it ignores."""

    model: LLMModel
    cores: int
    ignored: tuple[str, ...] = ()
    estimated_gib: float = 0.0

    def server_args(self, model_path: str, port: int,
                    adapters: Sequence[tuple[str, str]] = ()) -> list[str]:
        """llama-server's arguments, as a cluster pod's (profiles.llamaserver), on loopback.

        ``adapters`` are (name, GGUF file) in ``loraAdapters`` order: their ids.
        """
        where = Where(model_path, LOOPBACK, port, tuple(p for _, p in adapters),
                      cores=self.cores)
        return list(llama_server_args(self.model.spec, where).args)

    @property
    def slots(self) -> int:
        return parallel_slots(self.model.spec)


@dataclass(frozen=True)
class RemoteProxy:
    """A remote model routed through the local gateway, its key read from ``key_env``."""

    model: LLMModel
    key_env: str

    def route(self) -> dict[str, Any]:
        return {"name": self.model.name,
                **gateway_route(self.model, 1, {"env": self.key_env})}


@dataclass(frozen=True)
class NotServed:
    """A model `llmop up` leaves out, and what would change that."""

    model: LLMModel
    kind: Kind
    reason: str


Decision = LocalServe | RemoteProxy | NotServed


def key_env(secret_name: str) -> str:
    """The environment variable holding a remote model's key: its Secret's name, shouted.

    openai-api-key -> OPENAI_API_KEY, anthropic-api-key -> ANTHROPIC_API_KEY.
    """
    return secret_name.upper().replace("-", "_").replace(".", "_")


def decide(model: LLMModel, machine: Machine, env: Collection[str]) -> Decision:
    """Serve, proxy or leave out one valid model, with the reason a newcomer can act on."""
    spec = model.spec
    if spec.is_remote:
        api = spec.remote_api
        assert api is not None
        variable = key_env(api.api_key_secret)
        if variable in env:
            return RemoteProxy(model, variable)
        return NotServed(model, "skipped", f"set {variable} to proxy it through the gateway")
    vendor = spec.accelerator_vendor
    if vendor != "cpu":
        count = spec.resources.accelerator_count
        what = VENDOR_NAMES.get(vendor, vendor)
        if vendor in machine.accelerators:
            reason = (f"needs {count} {what}(s); `llmop up` runs models on the CPU with "
                      "llama.cpp only: serve it in a cluster, or add a cpu variant")
        else:
            reason = (f"needs {count} {what}(s) and this machine has none: serve it in a "
                      "cluster, or add a cpu variant with inferenceEngine llamacpp")
        return NotServed(model, "unplaceable", reason)
    if spec.inference_engine == "vllm":
        return NotServed(model, "unplaceable", VLLM_ON_CPU)
    if spec.inference_engine not in LOCAL_ENGINES:
        return NotServed(model, "unplaceable", f"inferenceEngine {spec.inference_engine} "
                         "needs a GPU; on the CPU use llamacpp or ollama")
    source = spec.model_source
    if source is None or source.type != "file":
        kind = source.type if source is not None else "(none)"
        return NotServed(model, "unplaceable", f"modelSource.type {kind} is fetched inside a "
                         "cluster; on one machine use type file with a path or pythonPackage")
    for adapter in spec.lora_adapters or ():
        if adapter.source.type != "file":
            return NotServed(model, "unplaceable", f"LoRA adapter {adapter.name}: source type "
                             f"{adapter.source.type} is fetched inside a cluster; on one "
                             "machine use type file with a path to its GGUF file")
    verdict = plan(model)
    if verdict.verdict == "does-not-fit":
        return NotServed(model, "unplaceable", verdict.reason)
    need = verdict.estimate.total_gib if verdict.estimate else 0.0
    if need > machine.memory_gib:
        return NotServed(model, "unplaceable", f"needs ~{need:.1f} GiB of RAM and this "
                         f"machine has {machine.memory_gib:.1f} GiB: lower the context "
                         "(engineArgs ctx-size) or pick a smaller quantization")
    tier = host_tier_mib(spec, llama_server=True) / 1024
    if tier > machine.free_gib or need + tier > machine.memory_gib:
        return NotServed(model, "unplaceable", _tier_too_big(spec, need, tier, machine))
    placed = llama_server_args(spec, Where("", LOOPBACK, 0, cores=machine.cpus))
    return LocalServe(model, machine.cpus, placed.ignored, round(need, 1))


def _tier_too_big(spec: LLMModelSpec, need: float, tier: float, machine: Machine) -> str:
    """Why the model's host KV tier does not fit this machine, with both figures."""
    size = spec.kv_cache.host_memory if spec.kv_cache and spec.kv_cache.host_memory \
        is not None else f"{tier * 1024:.0f}Mi (the default)"
    if tier > machine.free_gib:
        return (f"kvCache.hostMemory {size} does not fit this machine's free memory "
                f"({machine.free_gib:.1f} GiB of {machine.memory_gib:.1f} GiB): lower it, "
                "or set 0 to turn the tier off")
    return (f"the model needs ~{need:.1f} GiB and its kvCache.hostMemory {size} "
            f"{tier:.1f} GiB more, and this machine has {machine.memory_gib:.1f} GiB: lower "
            "hostMemory, or set 0 to turn the tier off")


def file_does_not_fit(model: LLMModel, file: ModelFileStatus, machine: Machine) -> str | None:
    """Why the model file itself is too big for this machine's RAM (None: it fits).

    The same context as the planner, with the KV cache from the file's own header; the
    parameter count in the spec may be wrong or absent.
    """
    verdict = plan(model)
    context = verdict.estimate.context_tokens if verdict.estimate else DEFAULT_CONTEXT_TOKENS
    need = estimate_from_file(file, context, on_accelerator=False,
                              slots=parallel_slots(model.spec))
    if need is None or need.total_gib <= machine.memory_gib:
        return None
    return (f"{file.file} needs ~{need.total_gib:.1f} GiB of RAM at {context} tokens of "
            f"context (from its header: {file.layers} layers, {file.size_bytes / GIB:.1f} GiB "
            f"of weights) and this machine has {machine.memory_gib:.1f} GiB: lower the "
            "context (engineArgs ctx-size) or pick a smaller quantization")


@dataclass
class Arrangement:
    """Every model's decision, in input order, with clashes between models resolved."""

    decisions: list[Decision] = field(default_factory=list)

    @property
    def served(self) -> list[LocalServe]:
        return [d for d in self.decisions if isinstance(d, LocalServe)]

    @property
    def proxied(self) -> list[RemoteProxy]:
        return [d for d in self.decisions if isinstance(d, RemoteProxy)]


def arrange(models: Sequence[LLMModel], machine: Machine, env: Collection[str]) -> Arrangement:
    """Decide for every model, leaving out clashes.

    A model whose name or modelId an earlier one already uses is left out (kind "clash"):
    the gateway routes by modelId, the runtime keys processes by name. A model with a guard
    whose judge none of the models declares is not served (its guard could never pass).
    Callers put the models already running first, so that a new file never takes over a
    running model.
    """
    out = Arrangement()
    known = declared(models)
    names: set[str] = set()
    ids: dict[str, str] = {}  # modelId -> the model serving it
    for model in models:
        if model.name in names:
            out.decisions.append(NotServed(model, "clash", f"metadata.name {model.name} is "
                                           "already used by another model; names must be "
                                           "unique"))
            continue
        names.add(model.name)
        served = [model.spec.model_id, *(a.name for a in model.spec.lora_adapters or ())]
        taken = next((n for n in served if n in ids), None)
        if taken is not None:
            what = "modelId" if taken == model.spec.model_id else "LoRA adapter name"
            out.decisions.append(NotServed(model, "clash", f"{what} {taken} is already "
                                           f"served by {ids[taken]}; give this model another "
                                           f"{what}"))
            continue
        judges = unknown_guard_models(model, known, "in the files given")
        decision = NotServed(model, "unplaceable", "; ".join(map(str, judges))) if judges \
            else decide(model, machine, env)
        out.decisions.append(decision)
        if not isinstance(decision, NotServed):
            ids.update(dict.fromkeys(served, model.name))
    _pooled(out, machine)
    return out


def _pooled(out: Arrangement, machine: Machine) -> None:
    """Pools whose members disagree, or do not fit together, serve none of those members.

    Only the members this machine serves count: one left out leaves its pool smaller.
    """
    served = [d.model for d in out.served]
    problems = across_pools(served, "in the files given")
    for (namespace, name), members in pools(served).items():
        # the loaded members and their host KV tiers (a llama-server each)
        need = plan_pool(members).need_gib + pool_tier_mib(
            [m.spec for m in members], members[0].spec.pool.max_loaded
            if members[0].spec.pool else None) / 1024
        if any((namespace, m.name) in problems for m in members) \
                or need <= machine.memory_gib:
            continue
        for member in members:
            problems.setdefault((namespace, member.name), []).append(Problem(
                "spec.pool.maxLoaded", f"pool {name} needs ~{need:.1f} GiB with its "
                f"{member.spec.pool.max_loaded if member.spec.pool else 0} largest members "
                f"loaded (their host KV tiers included) and this machine has "
                f"{machine.memory_gib:.1f} GiB: lower maxLoaded"))
    for serve in out.served:
        if serve.model.spec.pool is not None:
            try:
                models_preset([Member(serve.model.spec.model_id, "", serve.server_args("", 0))])
            except ValueError as exc:
                problems.setdefault((serve.model.namespace, serve.model.name), []).append(
                    Problem("spec.engineArgs", f"{exc}: a pool's members load from one "
                            "preset file; give the value without newlines or outer spaces"))
    for i, decision in enumerate(out.decisions):
        found = problems.get((decision.model.namespace, decision.model.name))
        if found and isinstance(decision, LocalServe):
            out.decisions[i] = NotServed(decision.model, "unplaceable",
                                         "; ".join(map(str, found)))
