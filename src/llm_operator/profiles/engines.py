"""Inference engine profiles: how vLLM, SGLang, llama.cpp and Ollama load a model, serve :8000."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from types import MappingProxyType

from llm_operator.api import vllm_cpu
from llm_operator.api.serving_rules import asked_nodes
from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.profiles import adapters
from llm_operator.profiles.flags import flag_args
from llm_operator.profiles.kv_tier import TIER_ARGS, vllm_tier_args
from llm_operator.profiles.llamaserver import (
    CONTEXT_ARGS,
    Where,
    context_per_slot,
    cpu_threads,
    llama_server_args,
)

PORT = 8000  # every engine serves its OpenAI-compatible API here
TP_ARGS = ("tensor-parallel-size", "tp-size", "tp")  # vLLM's; SGLang's long and short
CACHE_DIR = "/model-cache"
SOURCE_DIR = f"{CACHE_DIR}/source"  # where the fetch step puts the weights
GGUF_LINK = f"{CACHE_DIR}/model.gguf"  # the one GGUF file llama.cpp loads
CHOSEN_GGUF = f"{CACHE_DIR}/.llmop-gguf"  # its path, written by the model-verify step
OLLAMA_MODELS_DIR = f"{CACHE_DIR}/ollama"
NON_ROOT_UID = 65532
# vLLM and SGLang read Hugging Face weights from the cache and never download at start.
HF_CACHE_ENV = (("HF_HOME", f"{CACHE_DIR}/hf-home"), ("HF_HUB_OFFLINE", "1"))
# vLLM's own cache on the cache volume: its torch.compile artifacts (torch_compile_cache)
# survive a restarted engine; on CPU, inductor's cache beside it does (see _vllm).
VLLM_CACHE_ROOT = f"{CACHE_DIR}/vllm"
INDUCTOR_CACHE_DIR = f"{VLLM_CACHE_ROOT}/inductor"  # torch.compile's kernels (vLLM on CPU)
# --dtype from the weight format, where the format names one.
VLLM_DTYPES = MappingProxyType({"BF16": "bfloat16", "FP16": "float16"})

# Ollama has no command-line flags for `serve`; these engineArgs map to its environment.
OLLAMA_ENV_ARGS = MappingProxyType({
    "num-ctx": "OLLAMA_CONTEXT_LENGTH",
    "num-parallel": "OLLAMA_NUM_PARALLEL",
    "keep-alive": "OLLAMA_KEEP_ALIVE",
    "flash-attention": "OLLAMA_FLASH_ATTENTION",
    "kv-cache-type": "OLLAMA_KV_CACHE_TYPE",
    "max-loaded-models": "OLLAMA_MAX_LOADED_MODELS",
})



@dataclass(frozen=True)
class Serve:
    """The serving container's command line and environment."""

    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class EngineProfile:
    """What is engine-specific about serving."""

    name: str
    health_path: str
    metrics_path: str | None  # Prometheus exposition, None when the engine has none
    queue_metric: str | None  # requests waiting for a slot (KEDA's scale signal)
    runs_as_non_root: bool
    needs_shm: bool
    gguf_only: bool  # loads exactly one GGUF file

    def served_context_tokens(self, spec: LLMModelSpec) -> int | None:
        """The context length the engine will allocate for, from engineArgs or the spec."""
        return context_per_slot(spec)


VLLM = EngineProfile(
    name="vllm", health_path="/health", metrics_path="/metrics",
    queue_metric="vllm:num_requests_waiting", runs_as_non_root=False, needs_shm=True,
    gguf_only=False,
)
LLAMACPP = EngineProfile(
    name="llamacpp", health_path="/health", metrics_path="/metrics",
    queue_metric="llamacpp:requests_deferred", runs_as_non_root=True, needs_shm=False,
    gguf_only=True,
)
SGLANG = EngineProfile(
    name="sglang", health_path="/health", metrics_path="/metrics",
    queue_metric="sglang:num_queue_reqs", runs_as_non_root=False, needs_shm=True,
    gguf_only=False,
)
OLLAMA = EngineProfile(
    name="ollama", health_path="/api/version", metrics_path=None,
    queue_metric=None, runs_as_non_root=True, needs_shm=False, gguf_only=True,
)

ENGINES: MappingProxyType[str, EngineProfile] = MappingProxyType(
    {e.name: e for e in (VLLM, SGLANG, LLAMACPP, OLLAMA)}
)


def engine(name: str) -> EngineProfile:
    try:
        return ENGINES[name]
    except KeyError:
        valid = ", ".join(ENGINES)
        raise KeyError(f"unknown inferenceEngine {name!r}; valid values: {valid}") from None


def serve(spec: LLMModelSpec, on_accelerator: bool) -> Serve:
    """The serving container for a local model whose weights are already in the cache."""
    args = spec.engine_args or {}
    if spec.inference_engine == "vllm":
        return _vllm(spec, on_accelerator)
    if spec.inference_engine == "sglang":
        count = spec.resources.accelerator_count
        extra = ["--tp-size", str(count)] if count > 1 and not set(TP_ARGS) & set(args) else []
        return Serve(
            command=("python3", "-m", "sglang.launch_server"),
            args=("--model-path", SOURCE_DIR, "--served-model-name", spec.model_id,
                  "--host", "0.0.0.0", "--port", str(PORT), "--enable-metrics", *extra,
                  *adapters.sglang_args(spec), *flag_args(args)),
            env=HF_CACHE_ENV,
        )
    if spec.inference_engine == "llamacpp":
        where = Where(GGUF_LINK, "0.0.0.0", PORT, adapters.llamacpp_paths(spec),
                      on_accelerator=on_accelerator)
        return Serve(command=("/app/llama-server",),
                     args=llama_server_args(spec, where).args, env=(("HOME", "/tmp"),))
    env = [("OLLAMA_HOST", f"0.0.0.0:{PORT}"), ("OLLAMA_MODELS", OLLAMA_MODELS_DIR),
           ("HOME", "/tmp")]
    if "keep-alive" not in args:
        env.append(("OLLAMA_KEEP_ALIVE", "-1"))  # keep the model loaded: no cold reloads
    env += [(OLLAMA_ENV_ARGS[k], args[k]) for k in sorted(args) if k in OLLAMA_ENV_ARGS]
    return Serve(command=("/bin/ollama",), args=("serve",), env=tuple(env))


def _vllm(spec: LLMModelSpec, on_accelerator: bool, *, model: str = SOURCE_DIR,
          host: str = "0.0.0.0", port: int = PORT) -> Serve:
    """VLLM's API server; on CPU with its fixed KV space and one OpenMP thread per core."""
    args = spec.engine_args or {}
    extra: list[str] = []
    if spec.quantization in VLLM_DTYPES and "dtype" not in args:
        extra = ["--dtype", VLLM_DTYPES[spec.quantization]]
    count = spec.resources.accelerator_count
    if on_accelerator and count > 1 and "tensor-parallel-size" not in args:
        extra += ["--tensor-parallel-size", str(count)]
    if on_accelerator:
        extra += vllm_tier_args(spec)  # the host KV tier: offloaded blocks
    env = [*HF_CACHE_ENV, ("VLLM_CACHE_ROOT", VLLM_CACHE_ROOT)]
    if spec.lora_adapters:  # lora-sync loads and unloads them through the API
        env.append(("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True"))
    if not on_accelerator:
        context = context_per_slot(spec)
        if context and not set(CONTEXT_ARGS) & set(args):
            extra += ["--max-model-len", str(context)]
        nodes = asked_nodes(spec)
        space = vllm_cpu.kv_cache_space_gib(spec.total_parameters_billions or 0.0,
                                            spec.resources.memory_gi_b, nodes)
        # No pinning: the pod's CPUs are a CFS quota, not cores of its own (unless the node
        # runs the static CPU manager); pinned threads would share cores with other pods.
        env += [("VLLM_CPU_KVCACHE_SPACE", str(space)), ("VLLM_CPU_OMP_THREADS_BIND", "nobind"),
                ("OMP_NUM_THREADS", str(cpu_threads(spec))),
                # vLLM 0.32's AOT-compiled graphs fail to load on CPU ("'function' object has
                # no attribute 'finalize_loading'", vllm-project/vllm#45447): every start
                # compiled again. Without AOT, CPU graphs are cached by inductor alone, in
                # /tmp unless told: on the volume, a restarted engine skips the compile.
                ("VLLM_USE_AOT_COMPILE", "0"),
                ("TORCHINDUCTOR_CACHE_DIR", INDUCTOR_CACHE_DIR)]
    return Serve(
        command=("python3", "-m", "vllm.entrypoints.openai.api_server"),
        args=("--model", model, "--served-model-name", spec.model_id,
              "--host", host, "--port", str(port), *extra,
              *adapters.vllm_args(spec), *flag_args(args)),
        env=tuple(env),
    )


def vllm_sleeper(spec: LLMModelSpec, model: str, port: int, gpu_fraction: float) -> Serve:
    """A model pool member's vLLM server: on loopback in the pool's pod, in sleep mode.

    ``gpu_fraction``: the share of the accelerator's memory it may take while awake
    (``--gpu-memory-utilization``), so that the pool's ``maxLoaded`` fit side by side.
    """
    served = _vllm(spec, True, model=model, host="127.0.0.1", port=port)
    own = spec.engine_args or {}
    extra = ["--enable-sleep-mode"]
    if "gpu-memory-utilization" not in own:
        extra += ["--gpu-memory-utilization", f"{gpu_fraction:.2f}"]
    return Serve(command=served.command, args=(*served.args, *extra),
                 env=(*served.env, ("VLLM_SERVER_DEV_MODE", "1")))


def engine_arg_problems(spec: LLMModelSpec) -> list[str]:
    """EngineArgs the engine cannot take, with what to use instead."""
    args = spec.engine_args or {}
    problems = []
    if spec.inference_engine == "ollama":
        unknown = sorted(set(args) - set(OLLAMA_ENV_ARGS))
        if unknown:
            problems.append(
                f"Ollama takes no flags; unsupported engineArgs {', '.join(unknown)} "
                f"(supported: {', '.join(OLLAMA_ENV_ARGS)})"
            )
    reserved = {"model", "model-path", "host", "port", "served-model-name", "alias"} & set(args)
    if reserved:
        problems.append(
            f"engineArgs {', '.join(sorted(reserved))} are set by the operator (model path, "
            f"port {PORT} contract, served name = modelId) and cannot be overridden"
        )
    tier = sorted(k for k in args if k.replace("_", "-") in TIER_ARGS)  # vLLM takes either
    if tier:
        problems.append(f"engineArgs {', '.join(tier)}: set kvCache.hostMemory instead, "
                        "which sets the engine's host KV tier and counts it in the pod's "
                        "memory request (docs/kv-cache.md)")
    for key in CONTEXT_ARGS:
        if key in args and not args[key].isdigit():
            problems.append(f"engineArgs.{key} must be a whole number of tokens, "
                            f"got {args[key]!r}")
    if spec.inference_engine == "vllm" and spec.accelerator_vendor == "cpu" \
            and asked_nodes(spec) > 1 and args.get("enforce-eager", "").lower() == "true":
        # seen on the test node: the later stage asserted on its first request
        # (intermediate tensors are made by the compile's warm-up), the engine died and
        # the leader restarted (docs/deviations.md)
        problems.append("engineArgs.enforce-eager: vLLM's CPU build cannot run pipeline "
                        "stages across pods in eager mode (its later stage fails on the "
                        "first request and the engine exits); remove enforce-eager, or "
                        "serve on one node")
    return problems


def _link_adapters(spec: LLMModelSpec) -> str:
    """Shell: link each fetched adapter's one GGUF file where --lora expects it."""
    lines = []
    for adapter in spec.lora_adapters or ():
        if adapter.source.type == "pvc":
            continue
        folder = shlex.quote(adapters.download_dir(adapter))
        target = shlex.quote(adapters.adapter_path(adapter, gguf=True))
        name = adapter.name
        lines.append(
            f"n=$(find {folder} -name '*.gguf' | wc -l); "
            f'[ "$n" -eq 1 ] || {{ echo "LoRA adapter {name}: expected one GGUF file in the '
            f'download, found $n" >&2; exit 1; }}; '
            f"ln -sfn \"$(find {folder} -name '*.gguf')\" {target}\n")
    return "".join(lines)


def prepare_script(spec: LLMModelSpec) -> str | None:
    """Shell run in the engine image after the fetch and the check.

    It serves the GGUF file the model-verify step chose (and checked), or imports it into
    Ollama.
    """
    if spec.inference_engine == "vllm":
        return None
    pick = (
        "set -eu\n"
        f"f=$(cat {CHOSEN_GGUF})\n"
        f'[ -f "$f" ] || {{ echo "the checked GGUF file $f is gone" >&2; exit 1; }}\n'
    )
    if spec.inference_engine == "llamacpp":
        return pick + f'ln -sfn "$f" {GGUF_LINK}\necho "serving $f"\n' + _link_adapters(spec)
    name = shlex.quote(spec.model_id)
    return pick + (
        "ollama serve >/tmp/ollama.log 2>&1 & pid=$!\n"
        "i=0; until ollama list >/dev/null 2>&1; do i=$((i+1)); "
        '[ "$i" -lt 120 ] || { cat /tmp/ollama.log >&2; exit 1; }; sleep 1; done\n'
        "printf 'FROM %s\\n' \"$f\" > /tmp/Modelfile\n"
        f"ollama create {name} -f /tmp/Modelfile\n"
        'kill "$pid"\n'
    )
