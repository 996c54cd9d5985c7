"""EngineArgs as command-line flags, the way vLLM and llama-server spell them."""

from __future__ import annotations

from collections.abc import Mapping


def flag_args(engine_args: Mapping[str, str]) -> list[str]:
    """EngineArgs as command-line flags in sorted key order.

    "true" becomes a bare ``--key``, "false" becomes ``--no-key`` (how vLLM's and
    llama.cpp's boolean flags are spelled), anything else ``--key value``.
    """
    out: list[str] = []
    for key in sorted(engine_args):
        value = engine_args[key]
        if value.lower() == "true":
            out.append(f"--{key}")
        elif value.lower() == "false":
            out.append(f"--no-{key}")
        else:
            out += [f"--{key}", value]
    return out
