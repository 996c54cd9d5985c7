"""The host-memory KV tier a model declares: its size as a Kubernetes quantity (pure)."""

from __future__ import annotations

import re

from pydantic import Field, StrictInt, field_validator

from llm_operator.api.wire import Wire

# A whole amount with its unit, or 0 (off): a Kubernetes quantity without fractions or
# exponents, a size a reader takes in at a glance. A bare number would count bytes (a rule
# refuses one other than 0: "hostMemory: 512" is never what was meant).
QUANTITY = r"^(0|[1-9][0-9]{0,6}(Ki|Mi|Gi|Ti|k|M|G|T))$"
_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
MIB = 2**20
_QUANTITY = re.compile(QUANTITY)


def quantity_bytes(value: int | str) -> int:
    """Bytes of a quantity ``QUANTITY`` allows, or of a bare number (ValueError otherwise)."""
    if isinstance(value, int):
        return value
    text = value
    found = _QUANTITY.fullmatch(text)
    if found is None:
        raise ValueError(f"{text!r} is not a size with its unit, such as 512Mi or 2Gi, "
                         "or 0")
    suffix = found.group(2)
    return 0 if suffix is None else int(text[:-len(suffix)]) * _SUFFIX[suffix]


def mib_quantity(mib: int) -> str:
    """MiB in the canonical form the API server stores ("1Gi", not "1024Mi"; "0")."""
    if mib == 0:
        return "0"
    for suffix, size in (("Ti", 2**20), ("Gi", 2**10)):
        if mib % size == 0:
            return f"{mib // size}{suffix}"
    return f"{mib}Mi"


class KvCacheSpec(Wire):
    """Where the engine keeps KV cache beyond its own (docs/kv-cache.md)."""

    host_memory: StrictInt | str | None = Field(
        None, description="A host-memory tier for prompt caches, a Kubernetes quantity such "
        "as 512Mi or 2Gi; 0 turns it off. llama.cpp keeps idle slots' prompts there "
        "(--cache-ram) and takes a new turn of a conversation from it; vLLM on nvidia or "
        "amd offloads KV blocks there (its native offloading connector). It is added to "
        "the pod's memory request and limit, on top of resources.memoryGiB. Unset: 256Mi "
        "for llama.cpp (never llama-server's own 8 GiB), off for vLLM.",
        json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": QUANTITY})

    @field_validator("host_memory")
    @classmethod
    def _a_size(cls, value: int | str | None) -> int | str | None:
        if value is None:
            return value
        if isinstance(value, str):
            quantity_bytes(value)  # the pattern (ValueError names what is allowed)
        elif value < 0:
            raise ValueError("hostMemory is a size such as 512Mi, 2Gi or 0")
        return value

    @property
    def host_memory_mib(self) -> int | None:
        """The declared tier in whole MiB (rounded up), None when not declared."""
        if self.host_memory is None:
            return None
        return -(-quantity_bytes(self.host_memory) // MIB)
