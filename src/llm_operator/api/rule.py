"""What a cross-field rule of LLMModel is: a CEL expression for the CRD and its Python twin."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llm_operator.api.v1alpha1 import LLMModelSpec

# The CRD has no default for these two (remote models have neither): CEL reads the default
# the types apply to local models.
VENDOR = "(has(self.acceleratorVendor) ? self.acceleratorVendor : 'nvidia')"
ENGINE = "(has(self.inferenceEngine) ? self.inferenceEngine : 'vllm')"


@dataclass(frozen=True)
class Rule:
    """One validation rule.

    ``location`` is where the CEL rule sits in the CRD schema ("" is the root, "spec",
    "spec.scaling", ...); ``field`` is the offending field relative to it (CEL ``fieldPath``).
    ``holds`` is the Python twin: it receives the object at ``location`` and returns True
    when the rule is satisfied.
    """

    id: str
    location: str
    field: str
    cel: str
    message: str
    holds: Callable[[Any], bool]
    reason: str = "FieldValueInvalid"

    @property
    def path(self) -> str:
        """The offending field's full path, e.g. ``spec.remoteApi``."""
        return ".".join(p for p in (self.location, self.field.lstrip(".")) if p)


def is_local(spec: LLMModelSpec) -> bool:
    return spec.deployment_mode == "local"
