"""What every model pool's pod has, whichever engine serves it: names and mount points."""

from __future__ import annotations

import posixpath

from llm_operator.api.v1alpha1 import LLMModel

CONFIG_DIR = "/etc/llmop-pool"  # the pool's ConfigMap: llama.cpp's preset, vLLM's launcher
MEMBERS_DIR = "/models"
SERVER_CONTAINER = "pool-server"  # the engine's container: its log says why a load failed


def member_dir(member: LLMModel) -> str:
    """Where a member's file (or model directory) is mounted in the pool's pod."""
    return posixpath.join(MEMBERS_DIR, member.name)
