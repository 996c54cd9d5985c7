"""Model pools: several LLMModels served by one engine that loads at most N of them at once."""

from __future__ import annotations

from pydantic import Field

from llm_operator.api.formats import DNS1035_LABEL
from llm_operator.api.wire import Wire

# The engines a pool runs on: llama-server's router mode loads and unloads its members;
# vLLM engines take turns on one accelerator with vLLM's sleep mode (CUDA and ROCm only).
POOL_ENGINES = ("llamacpp", "vllm")
SLEEP_MODE_VENDORS = ("nvidia", "amd")
POOL_NAME_MAX = 40  # "<pool>-pool" names its Deployment and Service


class PoolSpec(Wire):
    """The pool a model belongs to. Every member declares the same pool settings."""

    name: str = Field(
        min_length=1, max_length=POOL_NAME_MAX, pattern=DNS1035_LABEL,
        description="The pool's name, shared by its members (in one namespace). Members "
        "share one engine process that loads a member on its first request and unloads the "
        "least recently used one when maxLoaded are loaded.")
    max_loaded: int = Field(
        2, ge=1, le=16, description="Members loaded at once; a request for another one "
        "loads it (seconds for a small GGUF model) and unloads the least recently used. "
        "Every member declares the same value.")
    memory_gi_b: int | None = Field(
        None, alias="memoryGiB", ge=1, le=16384,
        description="Memory the pool's engine may use, in GiB. The planner refuses a member "
        "larger than this, and maxLoaded members whose largest ones do not fit together. "
        "Unset: the sum of the maxLoaded largest members' estimates.")
    idle_seconds: int | None = Field(
        None, ge=1, le=604_800, description="Unload this member's weights after this many "
        "seconds without a request (llama-server's --sleep-idle-seconds): its memory goes "
        "back, and its next request wakes it (seconds for a small GGUF model). Each member "
        "sets its own. Unset: it stays loaded until another member needs its place. "
        "llama.cpp pools.")
    min_residency_seconds: int | None = Field(
        None, ge=1, le=3600, description="A member loaded stays loaded at least this long "
        "before another member may take its place; a request for a member not loaded waits "
        "meanwhile, in the gateway, instead of the members swapping on every request "
        "(against thrash). Every member declares the same value. Unset: a member may be "
        "unloaded as soon as another needs its place.")
    max_swaps_per_minute: int | None = Field(
        None, ge=1, le=600, description="Members the pool loads per minute at most; a "
        "request for a member not loaded past it waits for the minute to move on (against "
        "thrash). Every member declares the same value. Unset: no budget.")
    pinned: bool | None = Field(
        None, description="Keep this member loaded (Ollama's keep_alive -1): it loads when "
        "the pool starts and is never unloaded for another member, which share the other "
        "maxLoaded places. The gateway that chooses which member leaves holds it: "
        "`llmop up`'s, or the pool pod's own.")
