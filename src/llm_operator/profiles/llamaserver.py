"""llama-server's command line from an LLMModel: one builder for the pod and for `llmop up`.

The cluster's llama.cpp pods and the processes `llmop up` starts on one machine run the same
llama-server with arguments from ``llama_server_args``; only where it runs differs (the
model file's path, the listening address, the cores it may use), given as ``Where``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from llm_operator.api.chat_templates import llamacpp_template_args
from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.profiles.flags import flag_args
from llm_operator.profiles.kv_tier import llama_server_tier_args

# Generated tokens when a request names no max_tokens. llama-server's own default is
# unlimited, which lets a base model's chat run until the context is full.
DEFAULT_MAX_TOKENS = 256
PREDICT_ARGS = ("n-predict", "predict")
# EngineArgs that set the context per request, whatever the engine (vLLM, llama.cpp, Ollama).
# (Only long names: engineArgs become `--key`, so llama-server's -c, -t, -n, -fa cannot be
# given.)
CONTEXT_ARGS = ("max-model-len", "ctx-size", "num-ctx")
# llama-server's flags that take on/off/auto rather than being bare switches.
ON_OFF_ARGS = ("flash-attn",)
# --lora-scaled takes FILE:SCALE[,FILE:SCALE...]
UNUSABLE_IN_LORA_PATH = (":", ",")
# Ollama's engineArgs (environment settings in its pods) as llama-server flags, for `llmop
# up`, which serves an Ollama model's GGUF file with llama-server (Ollama is llama.cpp inside).
OLLAMA_FLAGS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "num-parallel": ("parallel",),
    "flash-attention": ("flash-attn",),
    "kv-cache-type": ("cache-type-k", "cache-type-v"),
})


@dataclass(frozen=True)
class Where:
    """Where llama-server runs: its model file, its address, its adapters, its cores.

    ``adapter_paths`` are the GGUF files of ``loraAdapters``, in their order (their ids);
    llama-server cannot load one whose path holds ``:`` or ``,`` (``lora_path_problem``).
    ``cores`` caps the CPU threads by the machine's cores (`llmop up`); a pod has none.
    """

    model_path: str
    host: str
    port: int
    adapter_paths: tuple[str, ...] = ()
    on_accelerator: bool = False
    cores: int | None = None


@dataclass(frozen=True)
class LlamaServerArgs:
    """The arguments, and the engineArgs that could not be given to llama-server."""

    args: tuple[str, ...]
    ignored: tuple[str, ...] = ()


def lora_path_problem(name: str, path: str) -> str | None:
    """Why llama-server cannot load the adapter file at ``path`` (None: it can)."""
    bad = [c for c in UNUSABLE_IN_LORA_PATH if c in path]
    if not bad:
        return None
    return (f"LoRA adapter {name}: llama-server takes adapter files as FILE:SCALE lists and "
            f"cannot load {path} (its path contains {' and '.join(repr(c) for c in bad)}); "
            "move or rename the file")


def parallel_slots(spec: LLMModelSpec) -> int:
    """Requests llama.cpp serves at once; each holds a full context in the KV cache."""
    slots = spec.llama_cpp.parallel_slots if spec.llama_cpp else None
    if slots is None and spec.inference_engine == "ollama":
        wanted = (spec.engine_args or {}).get("num-parallel", "")
        slots = int(wanted) if wanted.isdigit() and int(wanted) > 0 else None
    return slots or 1


def context_per_slot(spec: LLMModelSpec) -> int | None:
    """The context each request may use: engineArgs (``CONTEXT_ARGS``) or contextWindowK."""
    args = spec.engine_args or {}
    for key in CONTEXT_ARGS:
        if args.get(key, "").isdigit():
            return int(args[key])
    return spec.context_window_k * 1024 if spec.context_window_k else None


def cpu_threads(spec: LLMModelSpec, cores: int | None = None) -> int:
    """Compute threads on the CPU: the whole cores the CPU request allows, at least one.

    llama-server starts a thread per core it sees, not per core a pod may use: under a 500m
    limit its 2 threads ran at 16 tokens/s, 1 thread at 23 (bench/node).
    """
    wanted = max(1, spec.resources.cpu_millicores // 1000)
    return min(wanted, cores) if cores else wanted


def _on_off(value: str) -> str:
    lowered = value.lower()
    if lowered in ("true", "1", "yes"):
        return "on"
    if lowered in ("false", "0", "no"):
        return "off"
    return value


def _engine_args(spec: LLMModelSpec) -> tuple[dict[str, str], list[str]]:
    """The engineArgs as llama-server flag names and values, and the ones left out."""
    args = dict(spec.engine_args or {})
    if spec.inference_engine != "ollama":
        args = llamacpp_template_args(args)  # a builtin name is applied with --no-jinja
        return {k: _on_off(v) if k in ON_OFF_ARGS else v for k, v in args.items()}, []
    flags: dict[str, str] = {}
    ignored = []
    for key, value in sorted(args.items()):
        if key in OLLAMA_FLAGS:
            for flag in OLLAMA_FLAGS[key]:
                flags[flag] = _on_off(value) if flag in ON_OFF_ARGS else value
        elif key != "num-ctx":  # the context, below
            ignored.append(f"engineArgs.{key}")
    flags.pop("parallel", None)  # the slots, below
    return flags, ignored


def llama_server_args(spec: LLMModelSpec, where: Where) -> LlamaServerArgs:
    """llama-server's arguments for a llama.cpp (or, on one machine, Ollama) model.

    - ``--ctx-size`` is the context per slot times the slots: llama.cpp splits it among
      them, so each request may use the whole context;
    - ``--threads`` on the CPU from ``resources.cpuMillicores``; every layer on the GPU;
    - ``--n-predict`` 256 when a request names no ``max_tokens`` (engineArgs n-predict);
    - ``--embeddings`` for a model whose domains include ``embedding``;
    - each LoRA adapter loaded at scale 0: applied to no request unless it asks (the router
      sets ``lora`` for an adapter's name);
    - ``--metrics`` always: the queue and token counters that scaling and status read;
    - ``--sleep-idle-seconds`` for a pool member with ``pool.idleSeconds``: its weights
      unloaded after that long without a request;
    - ``--cache-ram`` always: the host KV tier (``spec.kvCache.hostMemory``, else a small
      default) that keeps idle slots' prompts, never llama-server's own 8 GiB;
    - ``--no-jinja`` with a builtin ``chat-template`` name (``api.chat_templates``): with
      Jinja on, llama-server would take the name for the template's text.
    EngineArgs come last, as flags (``flag_args``).
    """
    args, ignored = _engine_args(spec)
    out = ["--model", where.model_path, "--alias", spec.model_id, "--host", where.host,
           "--port", str(where.port), "--metrics"]
    context = context_per_slot(spec)
    slots = parallel_slots(spec)
    if context and (slots > 1 or "ctx-size" not in args):
        out += ["--ctx-size", str(context * slots)]
        args = {k: v for k, v in args.items() if k != "ctx-size"}
    if where.on_accelerator and "n-gpu-layers" not in args:
        out += ["--n-gpu-layers", "999"]
    if not where.on_accelerator and "threads" not in args:
        out += ["--threads", str(cpu_threads(spec, where.cores))]
    settings = spec.llama_cpp
    out += ["--parallel", str(slots)]  # llama-server's own default is 4 slots sharing one KV
    out += llama_server_tier_args(spec)
    if spec.pool is not None and spec.pool.idle_seconds is not None:  # a pool member
        out += ["--sleep-idle-seconds", str(spec.pool.idle_seconds)]
    if settings is not None and settings.flash_attention is not None:
        out += ["--flash-attn", "on" if settings.flash_attention else "off"]
    if settings is not None and settings.mlock:  # llama.cpp's --mlock is now a load mode
        out += ["--load-mode", "mmap+mlock"]
    if not set(PREDICT_ARGS) & set(args):
        out += ["--n-predict", str(DEFAULT_MAX_TOKENS)]
    if "embedding" in (spec.domains or ()) and not {"embedding", "embeddings"} & set(args):
        out.append("--embeddings")
    # At scale 0: a request that names no adapter gets none. (--lora and
    # --lora-init-without-apply would still apply every adapter to such requests.)
    out += [x for path in where.adapter_paths for x in ("--lora-scaled", f"{path}:0")]
    return LlamaServerArgs((*out, *flag_args(args)), tuple(ignored))
