"""LLMModel v1alpha1 status types: phase, conditions, replicas and the served file."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import Field

from llm_operator.api.wire import Wire

Phase = Literal[
    "Pending", "Downloading", "Starting", "Ready", "Degraded", "Failed", "Proxying", "Idle",
    "WaitingForGPU",
]
ConditionStatus = Literal["True", "False", "Unknown"]
PHASES: tuple[str, ...] = get_args(Phase)
SHA256_HEX = r"^[a-f0-9]{64}$"


class Condition(Wire):
    """A status condition in the standard Kubernetes shape (metav1.Condition)."""

    type: str = Field(min_length=1, max_length=316, description="Condition type, e.g. Ready.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation the condition was set from."
    )
    last_transition_time: str = Field(
        description="When the status last changed (RFC 3339).",
        json_schema_extra={"format": "date-time"},
    )
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="CamelCase machine-readable reason.",
    )
    message: str = Field(max_length=32768, description="Human-readable explanation.")


class ModelFileStatus(Wire):
    """What the served GGUF file says about itself (read from its header)."""

    file: str = Field(max_length=4096, description="The file's name.")
    size_bytes: int = Field(ge=0, description="Its size in bytes.")
    sha256: str | None = Field(None, pattern=SHA256_HEX,
                               description="Its SHA-256, when modelSource.sha256 checked it.")
    architecture: str | None = Field(None, max_length=128,
                                     description="general.architecture, e.g. gemma3.")
    name: str | None = Field(None, max_length=512, description="general.name.")
    quantization: str | None = Field(None, max_length=64,
                                     description="general.file_type, e.g. Q4_K_M.")
    layers: int | None = Field(None, ge=0, description="Transformer blocks (block_count).")
    context_length: int | None = Field(None, ge=0, description="Trained context, in tokens.")
    embedding_length: int | None = Field(None, ge=0, description="Hidden size.")
    head_count: int | None = Field(None, ge=0, description="Attention heads.")
    head_count_kv: int | None = Field(
        None, alias="headCountKV", ge=0, description="Key/value heads (grouped-query attention).")
    key_length: int | None = Field(
        None, ge=0, description="Width of one attention head's key (default embeddingLength "
        "/ headCount).")
    value_length: int | None = Field(None, ge=0, description="Width of one head's value.")
    sliding_window: int | None = Field(
        None, ge=0, description="Tokens a sliding-window attention layer sees "
        "(attention.sliding_window), when the model has such layers.")
    sliding_window_layers: int | None = Field(
        None, ge=0, description="How many layers attend through the sliding window (the "
        "others see the whole context): from the header's sliding_window_pattern, else the "
        "architecture's own pattern as llama.cpp applies it (Gemma 3: 5 of every 6).")
    chat_template: bool | None = Field(
        None, description="Whether the file carries its own chat template "
        "(tokenizer.chat_template). llama-server applies it unless engineArgs.chat-template "
        "declares another; with neither, it formats every conversation as ChatML.")


class LLMModelStatus(Wire):
    """Observed state of an LLMModel, written by the operator."""

    phase: Phase | None = Field(
        None,
        description="Pending, Downloading, Starting, Ready, Degraded, Failed, Proxying (remote "
        "gateway ready), Idle (scaled to zero by design) or WaitingForGPU (queued until "
        "accelerators free up).",
    )
    endpoint: str | None = Field(
        None, max_length=2048, description="OpenAI-compatible base URL, set once serving."
    )
    conditions: list[Condition] | None = Field(
        None, max_length=32,
        description="Ready, Available, Progressing, Degraded, Placed and (autoscaled models) "
        "Scaling conditions.",
        json_schema_extra={
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
        },
    )
    accelerator_nodes: list[Annotated[str, Field(max_length=253)]] | None = Field(
        None, max_length=1000,
        description="Nodes where this model's inference pods are scheduled.",
    )
    prefetched_nodes: list[Annotated[str, Field(max_length=253)]] | None = Field(
        None, max_length=1000, description="Nodes that hold the model's images ahead "
        "(scaling.prefetchImages): their prefetch pod pulled them.")
    current_replicas: int | None = Field(None, ge=0, description="Ready replicas.")
    desired_replicas: int | None = Field(
        None, ge=0, description="Replicas asked for (the Deployment's spec.replicas, as the "
        "autoscaler or the fixed count set it).")
    requests_per_minute: int | None = Field(
        None, ge=0, description="Requests per minute over the last 5 minutes (from Prometheus)."
    )
    average_latency_ms: int | None = Field(
        None, ge=0, description="Mean end-to-end request latency over 5 minutes (Prometheus)."
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this status reflects."
    )
    model: ModelFileStatus | None = Field(
        None, description="The GGUF file being served, from its header (GGUF models only).")
    queue_position: int | None = Field(
        None, ge=1, description="Place in the GPU queue while WaitingForGPU (1: next to start).")
    host_kv_cache: str | None = Field(
        None, max_length=32, description="The host-memory KV tier the "
        "engine keeps (spec.kvCache.hostMemory, else its default; 0: off), in the pod's "
        "memory request on top of resources.memoryGiB. Unset for an engine without one.")
