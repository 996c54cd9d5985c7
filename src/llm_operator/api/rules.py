"""Cross-field rules of LLMModel (CEL for the CRD, and a Python twin), in the CRD's order."""

from __future__ import annotations

import re
from typing import Any

from llm_operator.api import vllm_cpu
from llm_operator.api.formats import LABEL_KEY, RESERVED_POD_KEY_PREFIXES
from llm_operator.api.gpu_rules import DRA_RULES, GPU_RULES
from llm_operator.api.kv_cache_rules import KV_CACHE_RULES
from llm_operator.api.pool_rules import POOL_RULES
from llm_operator.api.rule import ENGINE, VENDOR, Rule, is_local
from llm_operator.api.serving_rules import SERVING_RULES, asked_nodes
from llm_operator.api.template_rules import TEMPLATE_RULES
from llm_operator.api.v1alpha1 import LLMModel, LLMModelSpec

HF_REPO = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$"
# Any model name a client or a download may use: Hugging Face repo ids (owner/name), Ollama
# name:tag, image references (host:port/repo:tag@sha256:...), remote names (gpt-5.5,
# models/gemini-..., @cf/...). Each '.' or '/' is followed by a name character, so no '..',
# no '//', no leading '/', no '/.' and no trailing '.' or '/': never a path out of a directory.
MODEL_ID = r"^@?[A-Za-z0-9](?:[A-Za-z0-9_:@+-]|[./][A-Za-z0-9_:@+-])*$"
GEMINI_HOST = "https://generativelanguage.googleapis.com"
GEMINI_OPENAI_PATH = r"/openai/?$"


def gemini_url_fits(url: str, api: str) -> bool:
    """A Gemini base URL matches the API spoken: /openai for openai, the native one else."""
    if not url.startswith(GEMINI_HOST):
        return True
    return (re.search(GEMINI_OPENAI_PATH, url) is not None) == (api != "gemini")


GEMINI_MESSAGE = (
    "remoteApi.baseUrl: Gemini's OpenAI-compatible API is "
    "https://generativelanguage.googleapis.com/v1beta/openai; for Google's native API "
    "(.../v1beta) set remoteApi.api to gemini")

GEMINI_NATIVE_MESSAGE = (
    "remoteApi.baseUrl: with remoteApi.api gemini, use Google's native API "
    "https://generativelanguage.googleapis.com/v1beta, not its OpenAI-compatible /openai path")


LLAMACPP_FLAGS = ("parallel", "np", "flash-attn", "fa", "mlock", "no-mlock", "load-mode")


def _pod_key(key: str, reserved: tuple[str, ...]) -> bool:
    return re.match(LABEL_KEY, key) is not None and not key.startswith(reserved)


# What each adapter source type needs: the field in the CRD, the attribute in Python.
LORA_SOURCE_FIELDS = (("huggingface", "repo", "repo"), ("s3", "s3Bucket", "s3_bucket"),
                      ("oci", "ociImage", "oci_image"), ("pvc", "claimName", "claim_name"),
                      ("file", "path", "path"))


def _lora_source_complete(spec: LLMModelSpec) -> bool:
    return all(getattr(a.source, attr) is not None
               for a in spec.lora_adapters or () for kind, _, attr in LORA_SOURCE_FIELDS
               if a.source.type == kind)


def _default_tool_name_fits(spec: LLMModelSpec) -> bool:
    tool = spec.mcp_exposure.tool_name
    return not spec.mcp_exposure.enabled or tool is None or all(
        a.tool_name is not None or len(tool) + len(a.name) < 128
        for a in spec.lora_adapters or ())


def _vllm_on_cpu(spec: LLMModelSpec) -> bool:
    return is_local(spec) and spec.accelerator_vendor == "cpu" and spec.inference_engine == "vllm"


def _hf_source(spec: LLMModelSpec) -> bool:
    return spec.model_source is None or spec.model_source.type == "huggingface"


RULES: tuple[Rule, ...] = (
    Rule(
        id="name-format",
        location="",
        field=".metadata.name",
        cel="size(self.metadata.name) <= 63 && "
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        message="metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', "
        "starting with a letter, at most 63 characters): it names the model's Service",
        holds=lambda m: (
            len(m.metadata.name) <= 63
            and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", m.metadata.name) is not None
        ),
    ),
    Rule(
        id="remote-needs-remote-api",
        location="spec",
        field=".remoteApi",
        cel="self.deploymentMode != 'remote' || has(self.remoteApi)",
        message="remoteApi is required when deploymentMode is remote: set remoteApi.baseUrl "
        "and remoteApi.apiKeySecret",
        holds=lambda s: s.deployment_mode != "remote" or s.remote_api is not None,
        reason="FieldValueRequired",
    ),
    Rule(
        id="local-needs-parameters",
        location="spec",
        field=".totalParametersBillions",
        cel="self.deploymentMode != 'local' || has(self.totalParametersBillions)",
        message="totalParametersBillions is required for local models: the planner sizes "
        "accelerator memory and the model cache from it",
        holds=lambda s: not is_local(s) or s.total_parameters_billions is not None,
        reason="FieldValueRequired",
    ),
    Rule(
        id="vllm-cpu-16-bit",
        location="spec",
        field=".quantization",
        cel=f"self.deploymentMode != 'local' || {VENDOR} != 'cpu' || {ENGINE} != 'vllm' || "
        f"self.quantization in {list(vllm_cpu.QUANTIZATIONS)}",
        message="vLLM on acceleratorVendor cpu serves 16-bit Hugging Face weights: set "
        "quantization to BF16 or FP16, or use inferenceEngine llamacpp for GGUF files",
        holds=lambda s: not (
            _vllm_on_cpu(s) and s.quantization not in vllm_cpu.QUANTIZATIONS
        ),
    ),
    Rule(
        id="vllm-cpu-memory",
        location="spec",
        field=".resources.memoryGiB",
        cel=f"self.deploymentMode != 'local' || {VENDOR} != 'cpu' || {ENGINE} != 'vllm' || "
        f"!has(self.totalParametersBillions) || {vllm_cpu.MEMORY_CEL}",
        message=vllm_cpu.MEMORY_MESSAGE,
        holds=lambda s: not (
            _vllm_on_cpu(s) and s.total_parameters_billions is not None
            and s.resources.memory_gi_b < vllm_cpu.memory_floor_gib(
                s.total_parameters_billions, asked_nodes(s))
        ),
    ),
    Rule(
        id="sglang-on-gpus",
        location="spec",
        field=".inferenceEngine",
        cel=f"self.deploymentMode != 'local' || {ENGINE} != 'sglang' || "
        f"{VENDOR} in ['nvidia', 'amd']",
        message="SGLang is served on acceleratorVendor nvidia or amd: use inferenceEngine "
        "vllm on intel-gaudi, llamacpp or ollama on cpu",
        holds=lambda s: not (
            is_local(s) and s.inference_engine == "sglang"
            and s.accelerator_vendor not in {"nvidia", "amd"}
        ),
    ),
    Rule(
        id="sglang-not-gguf",
        location="spec",
        field=".quantization",
        cel=f"self.deploymentMode != 'local' || {ENGINE} != 'sglang' || "
        "!self.quantization.startsWith('GGUF-')",
        message="SGLang serves Hugging Face weights (FP16, BF16, FP8, AWQ, GPTQ), not GGUF "
        "files: use inferenceEngine llamacpp for GGUF",
        holds=lambda s: not (
            is_local(s) and s.inference_engine == "sglang" and s.quantization.startswith("GGUF-")
        ),
    ),
    Rule(
        id="gguf-engines-not-on-gaudi",
        location="spec",
        field=".inferenceEngine",
        cel=f"self.deploymentMode != 'local' || {VENDOR} != 'intel-gaudi' || "
        f"{ENGINE} == 'vllm'",
        message="llama.cpp, Ollama and SGLang do not support acceleratorVendor intel-gaudi: "
        "use inferenceEngine vllm",
        holds=lambda s: not (
            is_local(s) and s.accelerator_vendor == "intel-gaudi" and s.inference_engine != "vllm"
        ),
    ),
    Rule(
        id="llamacpp-needs-gguf",
        location="spec",
        field=".quantization",
        cel=f"self.deploymentMode != 'local' || {ENGINE} != 'llamacpp' || "
        "self.quantization.startsWith('GGUF-')",
        message="llama.cpp serves GGUF files only: set quantization to GGUF-Q4_K_M, "
        "GGUF-Q8_0, GGUF-F16 or GGUF-BF16",
        holds=lambda s: not (
            is_local(s) and s.inference_engine == "llamacpp"
            and not s.quantization.startswith("GGUF-")
        ),
    ),
    Rule(
        id="sha256-needs-gguf",
        location="spec",
        field=".modelSource.sha256",
        cel=f"!has(self.modelSource) || !has(self.modelSource.sha256) || "
        f"{ENGINE} in ['llamacpp', 'ollama'] || self.quantization.startsWith('GGUF-')",
        message="modelSource.sha256 checks one GGUF file: use it with inferenceEngine llamacpp "
        "or ollama, or a GGUF-* quantization",
        holds=lambda s: s.model_source is None or s.model_source.sha256 is None
        or s.inference_engine in {"llamacpp", "ollama"} or s.quantization.startswith("GGUF-"),
    ),
    Rule(
        id="llamacpp-settings-need-llamacpp",
        location="spec",
        field=".llamaCpp",
        cel=f"!has(self.llamaCpp) || (self.deploymentMode == 'local' && {ENGINE} == 'llamacpp')",
        message="llamaCpp settings apply to inferenceEngine llamacpp only: remove llamaCpp or "
        "use the llamacpp engine",
        holds=lambda s: s.llama_cpp is None or (is_local(s) and s.inference_engine == "llamacpp"),
    ),
    Rule(
        id="llamacpp-settings-not-in-engine-args",
        location="spec",
        field=".engineArgs",
        cel="!has(self.llamaCpp) || !has(self.engineArgs) || "
        f"!{list(LLAMACPP_FLAGS)}.exists(k, k in self.engineArgs)",
        message="with llamaCpp set, engineArgs must not also set "
        f"{', '.join(LLAMACPP_FLAGS)}: use llamaCpp.parallelSlots, flashAttention and mlock",
        holds=lambda s: s.llama_cpp is None
        or not set(LLAMACPP_FLAGS) & set(s.engine_args or {}),
    ),
    Rule(
        id="pod-label-keys",
        location="spec",
        field=".podLabels",
        cel="!has(self.podLabels) || self.podLabels.all(k, k.matches('" + LABEL_KEY
        + "') && !k.startsWith('ai.example.io/') && !k.startsWith('app.kubernetes.io/'))",
        message="each podLabels key must be a label key (an optional DNS prefix and /, then "
        "up to 63 letters, digits, - _ .) outside ai.example.io/ and app.kubernetes.io/, "
        "which the operator sets",
        holds=lambda s: all(_pod_key(k, RESERVED_POD_KEY_PREFIXES)
                            for k in s.pod_labels or {}),
    ),
    Rule(
        id="pod-annotation-keys",
        location="spec",
        field=".podAnnotations",
        cel="!has(self.podAnnotations) || self.podAnnotations.all(k, k.matches('"
        + LABEL_KEY + "') && !k.startsWith('ai.example.io/'))",
        message="each podAnnotations key must be an annotation key (an optional DNS prefix "
        "and /, then up to 63 letters, digits, - _ .) outside ai.example.io/, which the "
        "operator sets",
        holds=lambda s: all(_pod_key(k, ("ai.example.io/",)) for k in s.pod_annotations or {}),
    ),
    Rule(
        id="runtime-class-for-local-models",
        location="spec",
        field=".runtimeClassName",
        cel="!has(self.runtimeClassName) || self.deploymentMode == 'local'",
        message="runtimeClassName applies to the inference pods of local models; a remote "
        "model's gateway runs in the default runtime",
        holds=lambda s: s.runtime_class_name is None or is_local(s),
    ),
    Rule(
        id="lora-needs-adapter-engine",
        location="spec",
        field=".loraAdapters",
        cel="!has(self.loraAdapters) || size(self.loraAdapters) == 0 || "
        f"(self.deploymentMode == 'local' && {ENGINE} in ['vllm', 'sglang', 'llamacpp'])",
        message="loraAdapters are served by inferenceEngine vllm, sglang or llamacpp on a "
        "local model; Ollama and remote APIs cannot load them: remove loraAdapters or change "
        "engine",
        holds=lambda s: not s.lora_adapters
        or (is_local(s) and s.inference_engine in {"vllm", "sglang", "llamacpp"}),
    ),
    Rule(
        id="lora-name-not-model-id",
        location="spec",
        field=".loraAdapters",
        cel="!has(self.loraAdapters) || self.loraAdapters.all(a, a.name != self.modelId)",
        message="loraAdapters[].name is the model name clients send for the adapter: it "
        "must differ from modelId, which calls the model without one",
        holds=lambda s: all(a.name != s.model_id for a in s.lora_adapters or ()),
    ),
    Rule(
        id="lora-source-location",
        location="spec",
        field=".loraAdapters",
        cel="!has(self.loraAdapters) || self.loraAdapters.all(a, "
        + " && ".join(f"(a.source.type != '{kind}' || has(a.source.{field}))"
                      for kind, field, _ in LORA_SOURCE_FIELDS) + ")",
        message="each loraAdapters[].source needs the field of its type: repo "
        "(huggingface), s3Bucket (s3), ociImage (oci), claimName (pvc), path (file)",
        holds=_lora_source_complete,
        reason="FieldValueRequired",
    ),
    Rule(
        id="lora-tool-name-length",
        location="spec",
        field=".loraAdapters",
        cel="!self.mcpExposure.enabled || !has(self.mcpExposure.toolName) || "
        "!has(self.loraAdapters) || self.loraAdapters.all(a, has(a.toolName) || "
        "size(self.mcpExposure.toolName) + size(a.name) < 128)",
        message="an adapter's default MCP tool name (mcpExposure.toolName, a dot, its name) "
        "would exceed 128 characters: set loraAdapters[].toolName or shorten the names",
        holds=_default_tool_name_fits,
    ),
    Rule(
        id="routing-for-local-models",
        location="spec",
        field=".routing",
        cel="!has(self.routing) || self.deploymentMode == 'local'",
        message="routing spreads requests over a local model's replicas; a remote model has "
        "one upstream: remove routing",
        holds=lambda s: s.routing is None or is_local(s),
    ),
    Rule(
        id="prefix-settings-need-prefix-routing",
        location="spec.routing",
        field=".strategy",
        cel="(has(self.strategy) && self.strategy in ['prefix-hash', 'prefix-cache']) || "
        "(!has(self.prefixChars) && !has(self.loadBoundPercent))",
        message="routing.prefixChars and routing.loadBoundPercent tune prefix-hash and "
        "prefix-cache: set routing.strategy to one of them or remove these fields",
        holds=lambda r: r.strategy in ("prefix-hash", "prefix-cache")
        or (r.prefix_chars is None and r.load_bound_percent is None),
    ),
    Rule(
        id="accelerator-count-zero-only-for-cpu",
        location="spec",
        field=".resources.acceleratorCount",
        cel=f"self.deploymentMode != 'local' || {VENDOR} == 'cpu' || "
        "self.resources.acceleratorCount >= 1",
        message="resources.acceleratorCount must be at least 1 for an accelerator vendor; "
        "0 is only valid for acceleratorVendor cpu",
        holds=lambda s: (
            not is_local(s) or s.accelerator_vendor == "cpu" or s.resources.accelerator_count >= 1
        ),
    ),
    Rule(
        id="active-at-most-total",
        location="spec",
        field=".activeParametersBillions",
        cel="!has(self.activeParametersBillions) || !has(self.totalParametersBillions) || "
        "self.activeParametersBillions <= self.totalParametersBillions",
        message="activeParametersBillions must not exceed totalParametersBillions",
        holds=lambda s: (
            s.active_parameters_billions is None or s.total_parameters_billions is None
            or s.active_parameters_billions <= s.total_parameters_billions
        ),
    ),
    Rule(
        id="model-id-shape",
        location="spec",
        field=".modelId",
        cel=f"self.modelId.matches('{MODEL_ID}')",
        message="modelId must be a model name (owner/name, name:tag, an image reference or an "
        "API's model name): letters, digits and . _ - : @ +, parts separated by single '/', "
        "with no '..', no leading '/' and no trailing '.' or '/'",
        holds=lambda s: re.fullmatch(MODEL_ID[1:-1], s.model_id) is not None,
    ),
    Rule(
        id="huggingface-model-id",
        location="spec",
        field=".modelId",
        cel="self.deploymentMode != 'local' || "
        "(has(self.modelSource) && self.modelSource.type != 'huggingface') || "
        f"self.modelId.matches('{HF_REPO}')",
        message="modelId must be a Hugging Face repo path (owner/name) when the model source "
        "is huggingface",
        holds=lambda s: (
            not is_local(s) or not _hf_source(s) or re.fullmatch(HF_REPO[1:-1], s.model_id)
            is not None
        ),
    ),
    Rule(
        id="min-at-most-max",
        location="spec.scaling",
        field=".minReplicas",
        cel="self.minReplicas <= self.maxReplicas",
        message="scaling.minReplicas must not exceed scaling.maxReplicas",
        holds=lambda sc: sc.min_replicas <= sc.max_replicas,
    ),
    Rule(
        id="mcp-needs-tool-name",
        location="spec.mcpExposure",
        field=".toolName",
        cel="!self.enabled || has(self.toolName)",
        message="mcpExposure.toolName is required when mcpExposure.enabled is true",
        holds=lambda mx: not mx.enabled or mx.tool_name is not None,
        reason="FieldValueRequired",
    ),
    Rule(
        id="oci-needs-image",
        location="spec.modelSource",
        field=".ociImage",
        cel="self.type != 'oci' || has(self.ociImage)",
        message="modelSource.ociImage is required when modelSource.type is oci",
        holds=lambda ms: ms.type != "oci" or ms.oci_image is not None,
        reason="FieldValueRequired",
    ),
    Rule(
        id="file-needs-one-location",
        location="spec.modelSource",
        field=".path",
        cel="self.type != 'file' || (has(self.path) != has(self.pythonPackage))",
        message="modelSource type file needs exactly one of path (a GGUF file) or "
        "pythonPackage (a model packaged on PyPI)",
        holds=lambda ms: ms.type != "file" or (ms.path is None) != (ms.python_package is None),
        reason="FieldValueRequired",
    ),
    Rule(
        id="gemini-openai-endpoint",
        location="spec.remoteApi",
        field=".baseUrl",
        cel=f"(has(self.api) && self.api == 'gemini') || "
        f"!self.baseUrl.startsWith('{GEMINI_HOST}') || "
        f"self.baseUrl.matches('{GEMINI_OPENAI_PATH}')",
        message=GEMINI_MESSAGE,
        holds=lambda api: api.api == "gemini" or gemini_url_fits(api.base_url, api.api),
    ),
    Rule(
        id="gemini-native-endpoint",
        location="spec.remoteApi",
        field=".baseUrl",
        cel=f"!(has(self.api) && self.api == 'gemini') || "
        f"!self.baseUrl.matches('{GEMINI_OPENAI_PATH}')",
        message=GEMINI_NATIVE_MESSAGE,
        holds=lambda api: api.api != "gemini" or gemini_url_fits(api.base_url, api.api),
    ),
    *TEMPLATE_RULES,
    *SERVING_RULES,
    *POOL_RULES,
    *KV_CACHE_RULES,
    *GPU_RULES,
    *DRA_RULES,
    Rule(
        id="prefetch-local",
        location="spec",
        field=".scaling.prefetchImages",
        cel="self.deploymentMode == 'local' || !has(self.scaling) || "
        "!has(self.scaling.prefetchImages) || !self.scaling.prefetchImages",
        message="scaling.prefetchImages pulls a local model's engine and model images ahead: "
        "a remote model has none; remove it",
        holds=lambda s: is_local(s) or not s.scaling.prefetch_images,
    ),
    Rule(
        id="s3-needs-bucket",
        location="spec.modelSource",
        field=".s3Bucket",
        cel="self.type != 's3' || has(self.s3Bucket)",
        message="modelSource.s3Bucket is required when modelSource.type is s3",
        holds=lambda ms: ms.type != "s3" or ms.s3_bucket is not None,
        reason="FieldValueRequired",
    ),
)


def _at(model: LLMModel, location: str) -> Any:
    """The object at a rule's location, or None when an optional parent is absent."""
    node: Any = model
    attrs = {"spec": "spec", "scaling": "scaling", "mcpExposure": "mcp_exposure",
             "modelSource": "model_source", "remoteApi": "remote_api", "routing": "routing",
             "serving": "serving", "disaggregation": "disaggregation", "prefill": "prefill",
             "decode": "decode", "resources": "resources", "gpuSharing": "gpu_sharing",
             "kvCache": "kv_cache"}
    for part in filter(None, location.split(".")):
        node = getattr(node, attrs[part])
        if node is None:
            return None
    return node


def broken_rules(model: LLMModel) -> list[Rule]:
    """The rules this model breaks, in declaration order."""
    broken = []
    for rule in RULES:
        target = _at(model, rule.location)
        if target is not None and not rule.holds(target):
            broken.append(rule)
    return broken

