"""LoRA adapters served on top of a model: where each comes from, its name and rank."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from llm_operator.api.formats import (
    DNS1123_SUBDOMAIN,
    MCP_TOOL_NAME,
    NO_WHITESPACE,
    S3_BUCKET,
    SecretName,
)
from llm_operator.api.wire import Wire

LoraSourceType = Literal["huggingface", "s3", "oci", "pvc", "file"]
LORA_SOURCE_TYPES: tuple[str, ...] = get_args(LoraSourceType)
# An adapter's name is a model name clients send and part of an MCP tool name.
LORA_NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$"
# The max_lora_rank values vLLM accepts; an adapter's rank rounds up to one of them.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


class LoraSourceSpec(Wire):
    """Where one LoRA adapter's files come from."""

    type: LoraSourceType = Field(
        description="huggingface (repo), s3 (s3Bucket, s3Prefix), oci (ociImage), pvc "
        "(claimName, path inside it) or file (path on the machine `llmop up` runs on).")
    repo: str | None = Field(
        None, max_length=256, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9._-]+$",
        description="Hugging Face repo of the adapter, owner/name (type huggingface).")
    hugging_face_token_secret: SecretName | None = Field(
        None, description="Secret holding a Hugging Face token under the key `token`.")
    s3_bucket: str | None = Field(
        None, min_length=3, max_length=63, pattern=S3_BUCKET,
        description="S3 bucket holding the adapter (type s3).")
    s3_prefix: str | None = Field(None, max_length=1024,
                                  description="Key prefix inside the bucket (type s3).")
    s3_credentials_secret: SecretName | None = Field(
        None, description="Secret with AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY keys.")
    oci_image: str | None = Field(
        None, min_length=1, max_length=512, pattern=NO_WHITESPACE,
        description="OCI artifact reference holding the adapter (type oci).")
    claim_name: str | None = Field(
        None, max_length=253, pattern=DNS1123_SUBDOMAIN,
        description="PersistentVolumeClaim holding the adapter, mounted read-only (type pvc).")
    path: str | None = Field(
        None, min_length=1, max_length=4096,
        description="type pvc: the adapter's directory (vLLM) or GGUF file (llama.cpp) "
        "inside the claim; type file: the adapter on this machine, relative to the YAML "
        "file's directory unless absolute.")


class LoraAdapterSpec(Wire):
    """A LoRA adapter served on top of the model under a model name of its own."""

    name: str = Field(
        min_length=1, max_length=63, pattern=LORA_NAME,
        description="The model name clients send to use the adapter (letters, digits, "
        "- _ .); also the last part of its MCP tool name.")
    source: LoraSourceSpec = Field(description="Where the adapter's files come from.")
    rank: int | None = Field(
        None, ge=1, le=512, description="The adapter's LoRA rank (r). vLLM sizes its adapter "
        "buffers for the highest rank (rounded up to 8, 16, 32, 64, 128, 256, 320 or 512; "
        "unset counts as 16); the planner counts them.")
    tool_name: str | None = Field(
        None, max_length=128, pattern=MCP_TOOL_NAME,
        description="MCP tool name of the adapter (default: the model's toolName, a dot and "
        "the adapter's name).")
    tool_description: str | None = Field(
        None, max_length=4096, description="Tool description shown to AI agents.")
