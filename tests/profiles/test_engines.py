"""Engine profiles: flags, served names, Ollama's environment, and rejected engineArgs."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.engines import (
    engine_arg_problems,
    prepare_script,
    serve,
)
from llm_operator.profiles.flags import flag_args
from llm_operator.profiles.vendors import VENDORS, vendor


@pytest.mark.parametrize(("args", "flags"), [
    (None, []),
    ({"max-model-len": "65536"}, ["--max-model-len", "65536"]),
    ({"enable-chunked-prefill": "true"}, ["--enable-chunked-prefill"]),
    ({"enable-prefix-caching": "False"}, ["--no-enable-prefix-caching"]),
    ({"b": "2", "a": "1"}, ["--a", "1", "--b", "2"]),
])
def test_engine_args_become_sorted_flags(args: dict[str, str] | None, flags: list[str]) -> None:
    assert flag_args(args or {}) == flags


def _spec(base: dict[str, Any], **spec: Any) -> Any:
    doc = copy.deepcopy(base)
    doc["spec"].update(spec)
    return parse_llmmodel(doc).spec


def test_vllm_serves_the_model_id_from_the_local_cache(base_local: dict[str, Any]) -> None:
    srv = serve(_spec(base_local, resources={"acceleratorCount": 2, "vramPerAcceleratorGiB": 80}),
                on_accelerator=True)
    args = list(srv.args)
    assert args[args.index("--served-model-name") + 1] == "Qwen/Qwen3.5-9B"
    assert args[args.index("--model") + 1] == "/model-cache/source"
    assert args[args.index("--port") + 1] == "8000"
    assert args[args.index("--tensor-parallel-size") + 1] == "2"
    assert ("HF_HUB_OFFLINE", "1") in srv.env


# vLLM on CPU: (spec, the flags it adds, the environment it gets)
VLLM_ON_CPU = [
    ({"quantization": "BF16", "contextWindowK": 2, "totalParametersBillions": 0.27,
      "resources": {"acceleratorCount": 0, "cpuMillicores": 1500, "memoryGiB": 6}},
     ["--dtype", "bfloat16", "--max-model-len", "2048"],
     {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
      "OMP_NUM_THREADS": "1", "VLLM_CACHE_ROOT": "/model-cache/vllm"}),
    ({"quantization": "FP16", "contextWindowK": 32, "engineArgs": {"max-model-len": "4096"},
      "totalParametersBillions": 1, "resources": {"acceleratorCount": 0, "cpuMillicores": 8000,
                                                 "memoryGiB": 16}},
     ["--dtype", "float16", "--max-model-len", "4096"],  # the user's own length, once
     {"VLLM_CPU_KVCACHE_SPACE": "10", "OMP_NUM_THREADS": "8"}),
    ({"engineArgs": {"dtype": "float32"}, "totalParametersBillions": 1,
      "resources": {"acceleratorCount": 0}},
     ["--dtype", "float32"],  # no context to cap: vLLM takes the model's own
     {"VLLM_CPU_KVCACHE_SPACE": "10", "OMP_NUM_THREADS": "4"}),
]


@pytest.mark.parametrize(("spec", "flags", "env"), VLLM_ON_CPU)
def test_vllm_on_cpu_gets_its_kv_space_threads_and_dtype(
        base_local: dict[str, Any], spec: dict[str, Any], flags: list[str],
        env: dict[str, str]) -> None:
    srv = serve(_spec(base_local, acceleratorVendor="cpu", inferenceEngine="vllm",
                      **{"contextWindowK": None, **spec}), on_accelerator=False)
    args = list(srv.args)
    tail = args[args.index("8000") + 1:]
    assert [a for a in tail if a.startswith("--")] == [f for f in flags if f.startswith("--")]
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        assert args[args.index(flag) + 1] == value
    assert env.items() <= dict(srv.env).items()


@pytest.mark.parametrize(("spec", "expected"), [
    ({"resources": {"acceleratorCount": 2, "vramPerAcceleratorGiB": 80}},
     ["--tp-size", "2"]),
    ({"resources": {"acceleratorCount": 2, "vramPerAcceleratorGiB": 80},
      "engineArgs": {"tp": "1"}}, ["--tp", "1"]),  # the user's own tensor parallelism
    ({"loraAdapters": [
        {"name": "sql", "rank": 8, "source": {"type": "huggingface", "repo": "o/sql"}},
        {"name": "tone", "rank": 32, "source": {"type": "pvc", "claimName": "a", "path": "t"}}]},
     ["--enable-lora", "--max-lora-rank", "32", "--lora-paths",
      "sql=/model-cache/loras/sql-", "tone=/lora-claims/a/t"]),
], ids=["tp-from-count", "tp-from-engine-args", "lora-at-start"])
def test_sglang_serves_the_model_id_with_metrics(base_local: dict[str, Any], spec: Any,
                                                 expected: list[str]) -> None:
    srv = serve(_spec(base_local, inferenceEngine="sglang", **spec), on_accelerator=True)
    args = list(srv.args)
    assert srv.command == ("python3", "-m", "sglang.launch_server")
    assert args[:9] == ["--model-path", "/model-cache/source", "--served-model-name",
                        "Qwen/Qwen3.5-9B", "--host", "0.0.0.0", "--port", "8000",
                        "--enable-metrics"]
    rest = args[9:]
    assert len(rest) == len(expected)
    assert all(a.startswith(e) for a, e in zip(rest, expected, strict=True)), rest
    assert ("HF_HUB_OFFLINE", "1") in srv.env


@pytest.mark.parametrize(("name", "image"), [
    ("nvidia", "lmsysorg/sglang:v0.5.3.post3"),
    ("amd", "lmsysorg/sglang:v0.5.3.post3-rocm700-mi30x"),
    ("intel-gaudi", None), ("cpu", None),
])
def test_sglang_images_are_for_nvidia_and_amd(name: str, image: str | None) -> None:
    profile = vendor(name)
    assert profile.images["sglang"] == image
    assert (image is None) == ("sglang" in profile.unsupported_reason)


def test_llamacpp_loads_one_gguf_file_under_the_model_id(base_local: dict[str, Any]) -> None:
    spec = _spec(base_local, acceleratorVendor="cpu", inferenceEngine="llamacpp",
                 quantization="GGUF-Q4_K_M", resources={"acceleratorCount": 0})
    args = list(serve(spec, on_accelerator=False).args)
    assert args[args.index("--model") + 1] == "/model-cache/model.gguf"
    assert args[args.index("--alias") + 1] == "Qwen/Qwen3.5-9B"
    assert args[args.index("--ctx-size") + 1] == str(32 * 1024)
    assert "--n-gpu-layers" not in args
    script = prepare_script(spec)
    assert script is not None and "ln -sfn" in script


def test_ollama_maps_engine_args_to_its_environment(base_local: dict[str, Any]) -> None:
    spec = _spec(base_local, acceleratorVendor="cpu", inferenceEngine="ollama",
                 quantization="GGUF-Q4_K_M", resources={"acceleratorCount": 0},
                 engineArgs={"num-ctx": "32768"})
    env = dict(serve(spec, on_accelerator=False).env)
    assert env["OLLAMA_CONTEXT_LENGTH"] == "32768"
    assert env["OLLAMA_HOST"] == "0.0.0.0:8000"
    assert env["OLLAMA_KEEP_ALIVE"] == "-1"
    script = prepare_script(spec)
    assert script is not None and "ollama create Qwen/Qwen3.5-9B" in script


@pytest.mark.parametrize(("engine", "args", "words"), [
    ("ollama", {"temperature": "0.1"}, "unsupported engineArgs temperature"),
    ("vllm", {"port": "9000"}, "cannot be overridden"),
    ("sglang", {"model-path": "/elsewhere"}, "cannot be overridden"),
    ("vllm", {"max-model-len": "64k"}, "whole number"),
])
def test_engine_args_the_engine_cannot_take(base_local: dict[str, Any], engine: str,
                                            args: dict[str, str], words: str) -> None:
    vendor_name = "cpu" if engine == "ollama" else "nvidia"
    spec = _spec(base_local, acceleratorVendor=vendor_name, inferenceEngine=engine,
                 quantization="GGUF-Q4_K_M" if engine == "ollama" else "None",
                 resources={"acceleratorCount": 0 if vendor_name == "cpu" else 1},
                 engineArgs=args)
    assert any(words in p for p in engine_arg_problems(spec))


@pytest.mark.parametrize(("vendor_name", "nodes", "eager", "refused"), [
    ("cpu", 2, "true", True),    # the stage after the first fails on the first request
    ("cpu", 2, "True", True),
    ("cpu", 2, "false", False),
    ("cpu", 1, "true", False),   # one pod: eager mode runs
    ("nvidia", 2, "true", False),
])
def test_vllm_on_cpu_across_pods_is_refused_in_eager_mode(
        base_local: dict[str, Any], vendor_name: str, nodes: int, eager: str,
        refused: bool) -> None:
    spec = _spec(base_local, acceleratorVendor=vendor_name, inferenceEngine="vllm",
                 quantization="BF16",
                 resources={"acceleratorCount": 0, "memoryGiB": 64} if vendor_name == "cpu"
                 else {"acceleratorCount": 1},
                 serving={"nodes": nodes}, engineArgs={"enforce-eager": eager})
    said = [p for p in engine_arg_problems(spec) if "enforce-eager" in p]
    assert bool(said) == refused, said


@pytest.mark.parametrize(("name", "key", "selector"), [
    ("nvidia", "nvidia.com/gpu", {"nvidia.com/gpu.present": "true"}),
    ("amd", "amd.com/gpu", {"amd.com/gpu.present": "true"}),
    ("intel-gaudi", "habana.ai/gaudi", {"habana.ai/gaudi": "true"}),
    ("cpu", None, {}),
])
def test_vendor_keys_and_selectors(name: str, key: str | None, selector: dict[str, str]) -> None:
    profile = vendor(name)
    assert profile.resource_key == key
    assert dict(profile.node_selector) == selector


@pytest.mark.parametrize(("name", "count", "host_ipc"), [
    ("nvidia", 1, False), ("nvidia", 2, True), ("intel-gaudi", 1, True), ("cpu", 0, False),
])
def test_host_ipc_rule(name: str, count: int, host_ipc: bool) -> None:
    assert vendor(name).host_ipc(count) is host_ipc


def test_every_image_is_pinned() -> None:
    """A version tag, or (Intel's vault publishes only :latest) a release in the path."""
    for profile in VENDORS.values():
        for image in profile.images.values():
            if image is not None:
                repo, tag = image.rsplit(":", 1)
                assert tag != "latest" or re.search(r"/\d+\.\d+\.\d+/", repo), image


@pytest.mark.parametrize(("text", "card"), [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB"), ("AMD Instinct MI300X", None),
    ("h200", "NVIDIA H200 141GB"), (None, None),
])
def test_nvidia_card_lookup(text: str | None, card: str | None) -> None:
    found = vendor("nvidia").find_accelerator(text)
    assert (found.name if found else None) == card


def test_unknown_vendor_names_the_valid_ones() -> None:
    with pytest.raises(KeyError, match="nvidia, amd, intel-gaudi, cpu"):
        vendor("tpu")
