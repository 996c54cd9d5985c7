"""LoRA adapters: where each one lives in the pod, the engine flags, the sync list, its memory."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from llm_operator.api.lora import VLLM_LORA_RANKS, LoraAdapterSpec
from llm_operator.api.v1alpha1 import LLMModelSpec

LORA_DIR = "/model-cache/loras"  # downloaded adapters, on the model-cache volume
CLAIM_DIR = "/lora-claims"  # pvc adapters: each claim mounted read-only under here
SYNC_CONFIG_DIR = "/etc/llmop-lora"
SYNC_CONFIG_KEY = "adapters.json"
SYNC_PORT = 8001  # the lora-sync sidecar's /ready and /metrics
DEFAULT_RANK = 16  # vLLM's --max-lora-rank default
# The linear layers a LoRA usually adapts (q, k, v, o, gate, up, down), as a multiple of
# the hidden size summed over their inputs and outputs: 2h + 2(h + h/4) + 2h + 3(h + 3.5h)
# for grouped-query attention with an MLP of ~3.5h.
ADAPTED_WIDTH_PER_HIDDEN = 20.0
BYTES_PER_ADAPTER_WEIGHT = 2  # 16-bit
GIB = 1024**3


def digest(adapter: LoraAdapterSpec) -> str:
    """Eight hex characters that change whenever the adapter's source changes."""
    blob = json.dumps(adapter.source.model_dump(mode="json", exclude_none=True),
                      sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:8]


def download_dir(adapter: LoraAdapterSpec) -> str:
    """Where a fetched adapter lands: a new source is a new directory (a clean reload)."""
    return f"{LORA_DIR}/{adapter.name}-{digest(adapter)}"


def claim_volume(claim: str) -> str:
    """The pod volume of a PersistentVolumeClaim holding adapters (a DNS label)."""
    return f"lora-claim-{hashlib.sha256(claim.encode()).hexdigest()[:10]}"


def claim_path(adapter: LoraAdapterSpec) -> str:
    source = adapter.source
    assert source.claim_name is not None
    inside = (source.path or "").strip("/")
    root = f"{CLAIM_DIR}/{source.claim_name}"
    return f"{root}/{inside}" if inside else root


def adapter_path(adapter: LoraAdapterSpec, gguf: bool) -> str:
    """The path the engine loads: a directory (vLLM) or one GGUF file (llama.cpp).

    A fetched llama.cpp adapter is linked from its directory's one GGUF file by the
    model-prepare step.
    """
    if adapter.source.type == "pvc":
        return claim_path(adapter)
    return f"{download_dir(adapter)}.gguf" if gguf else download_dir(adapter)


def claims(spec: LLMModelSpec) -> list[str]:
    """The PersistentVolumeClaims the pods mount for pvc adapters, sorted, once each."""
    return sorted({a.source.claim_name for a in spec.lora_adapters or ()
                   if a.source.type == "pvc" and a.source.claim_name})


def max_lora_rank(spec: LLMModelSpec) -> int:
    """The --max-lora-rank for vLLM: the highest adapter rank, rounded up to one it takes."""
    highest = max((a.rank or DEFAULT_RANK for a in spec.lora_adapters or ()),
                  default=DEFAULT_RANK)
    return next(r for r in VLLM_LORA_RANKS if r >= highest)


def vllm_args(spec: LLMModelSpec) -> list[str]:
    """LoRA support sized for the adapters; which ones are loaded is lora-sync's business.

    The adapter list itself is not on the command line, so changing it restarts nothing.
    """
    if not spec.lora_adapters:
        return []
    args = ["--enable-lora"]
    if "max-lora-rank" not in (spec.engine_args or {}):
        args += ["--max-lora-rank", str(max_lora_rank(spec))]
    return args


SGLANG_LORA_SLOTS = 8  # SGLang's --max-loras-per-batch default


def sglang_args(spec: LLMModelSpec) -> list[str]:
    """Every adapter, loaded at start by name (`name=directory`); a new list restarts."""
    if not spec.lora_adapters:
        return []
    highest = max(a.rank or DEFAULT_RANK for a in spec.lora_adapters)
    return ["--enable-lora", "--max-lora-rank", str(highest), "--lora-paths",
            *(f"{a.name}={adapter_path(a, gguf=False)}" for a in spec.lora_adapters)]


def llamacpp_paths(spec: LLMModelSpec) -> tuple[str, ...]:
    """The GGUF file of each adapter in a pod, in the order of ``loraAdapters`` (their ids)."""
    return tuple(adapter_path(a, gguf=True) for a in spec.lora_adapters or ())


def llamacpp_selection(spec: LLMModelSpec, name: str | None) -> list[dict[str, float | int]]:
    """llama-server's per-request ``lora`` field that applies the adapter ``name`` alone.

    Every adapter is listed, by its id (its place among ``loraAdapters``): the named one at
    scale 1, the others at 0. ``None`` names none: the base model.
    """
    return [{"id": i, "scale": 1.0 if a.name == name else 0.0}
            for i, a in enumerate(spec.lora_adapters or ())]


def hf_token_env(secret: str) -> str:
    """The sidecar's environment variable holding one Secret's Hugging Face token."""
    return f"HF_TOKEN_{hashlib.sha256(secret.encode()).hexdigest()[:10].upper()}"


def sync_entries(spec: LLMModelSpec) -> list[dict[str, str]]:
    """The adapters lora-sync keeps loaded in vLLM: name, path, and what to download.

    Only Hugging Face adapters are downloaded by the sidecar; s3 and oci ones are fetched by
    init containers at pod start, pvc ones are mounted.
    """
    entries = []
    for adapter in spec.lora_adapters or ():
        entry = {"name": adapter.name, "path": adapter_path(adapter, gguf=False)}
        source = adapter.source
        if source.type == "huggingface" and source.repo:
            entry["repo"] = source.repo
            if source.hugging_face_token_secret:
                entry["tokenEnv"] = hf_token_env(source.hugging_face_token_secret)
        entries.append(entry)
    return entries


@dataclass(frozen=True)
class AdapterMemory:
    """Accelerator (or RAM) memory adapters take, with how it was counted."""

    gib: float
    slots: int
    rank: int


def adapter_memory(spec: LLMModelSpec, hidden: int | None = None,
                   layers: int | None = None) -> AdapterMemory | None:
    """What the adapters add to one replica, None without adapters.

    vLLM preallocates ``--max-loras`` slots (engineArgs, default 1) at ``--max-lora-rank``;
    llama.cpp holds every adapter at its own rank. One slot is rank x the adapted width of
    every layer, 16-bit. Without the file's real shape, the hidden size is estimated from
    the parameter count (~2048 x B^(1/3): 4096 at 8B, 8192 at 70B) and layers x hidden
    from params / (12 x hidden).
    """
    adapters = spec.lora_adapters or ()
    if not adapters:
        return None
    params = (spec.active_parameters_billions or spec.total_parameters_billions or 1.0) * 1e9
    width = hidden or 2048 * (params / 1e9) ** (1 / 3)
    depth_x_width = (layers * width) if layers else params / (12 * width)
    per_rank = ADAPTED_WIDTH_PER_HIDDEN * depth_x_width * BYTES_PER_ADAPTER_WEIGHT
    if spec.inference_engine == "vllm":
        raw = (spec.engine_args or {}).get("max-loras", "1")
        slots = int(raw) if raw.isdigit() and int(raw) > 0 else 1
        rank = max_lora_rank(spec)
        return AdapterMemory(slots * rank * per_rank / GIB, slots, rank)
    if spec.inference_engine == "sglang":  # a pool of max-loras-per-batch slots, max rank
        raw = (spec.engine_args or {}).get("max-loras-per-batch", str(SGLANG_LORA_SLOTS))
        slots = int(raw) if raw.isdigit() and int(raw) > 0 else SGLANG_LORA_SLOTS
        rank = max(a.rank or DEFAULT_RANK for a in adapters)
        return AdapterMemory(slots * rank * per_rank / GIB, slots, rank)
    ranks = [a.rank or DEFAULT_RANK for a in adapters]
    return AdapterMemory(sum(ranks) * per_rank / GIB, len(ranks), max(ranks))


@dataclass(frozen=True)
class SyncStep:
    """One call lora-sync makes to the engine."""

    action: str  # "unload" or "load"
    name: str
    path: str | None = None


def sync_steps(desired: list[dict[str, str]], loaded: dict[str, str]) -> list[SyncStep]:
    """The calls that make the engine's adapters (name -> path) match the list.

    Unloads first (gone, or now from another path: a changed source), then loads what is
    missing, in the list's order.
    """
    want = {e["name"]: e["path"] for e in desired}
    steps = [SyncStep("unload", name) for name, path in sorted(loaded.items())
             if want.get(name) != path]
    kept = {name for name, path in loaded.items() if want.get(name) == path}
    steps += [SyncStep("load", e["name"], e["path"]) for e in desired if e["name"] not in kept]
    return steps


def loaded_adapters(models: object) -> dict[str, str]:
    """Adapter name -> path from vLLM's /v1/models (adapters are the cards with a parent)."""
    data = models.get("data") if isinstance(models, dict) else None
    return {card["id"]: str(card.get("root") or "") for card in data or ()
            if isinstance(card, dict) and card.get("parent") and isinstance(card.get("id"), str)}


def parse_sync_list(text: str) -> list[dict[str, str]]:
    """The ConfigMap's adapter list; ValueError says what is wrong with it."""
    entries = json.loads(text)
    if not isinstance(entries, list):
        raise ValueError("the adapter list must be a JSON array")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not all(
                isinstance(entry.get(k), str) and entry[k] for k in ("name", "path")):
            raise ValueError(f"entry {i} needs a name and a path (strings)")
    return entries
