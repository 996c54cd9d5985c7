"""The node's vLLM compile cache: a hostPath where vLLM keeps its cache (settings.compileCache)."""

from __future__ import annotations

import posixpath
from typing import Any

from llm_operator.profiles.engines import VLLM_CACHE_ROOT
from llm_operator.profiles.settings import Settings

VOLUME = "compile-cache"


def compile_cache(namespace: str, engine: str, settings: Settings
                  ) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The volume and the mount of a ``namespace``'s compile cache, for a vLLM pod; None when off.

    Mounted over vLLM's cache directory (VLLM_CACHE_ROOT, inductor's kernels inside it),
    within the model's own cache volume: the environment vLLM is given stays the same. A
    directory per namespace, so that pods of one tenant never load code another compiled.
    """
    root = settings.compile_cache.host_path
    if root is None or engine != "vllm":
        return None
    volume = {"name": VOLUME, "hostPath": {"path": posixpath.join(root, namespace),
                                           "type": "DirectoryOrCreate"}}
    return volume, {"name": VOLUME, "mountPath": VLLM_CACHE_ROOT}
