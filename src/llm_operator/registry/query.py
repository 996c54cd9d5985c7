"""The guide's find_models semantics: labels where labels can express it, code for the rest."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import engine

SERVING_PHASES = ("Ready", "Proxying")
ANY_PHASE = "any"


@dataclass(frozen=True)
class Query:
    """What a caller is looking for; every criterion is optional."""

    domains: tuple[str, ...] = ()
    max_vram_gib: float | None = None
    min_context_k: int | None = None
    vendor: str | None = None
    mode: str | None = None
    phases: tuple[str, ...] = SERVING_PHASES  # ("any",) for every phase, or none at all
    thinking: bool | None = None

    def label_requirements(self) -> list[tuple[str, set[str]]]:
        """(label key, allowed values) pairs; all must hold."""
        reqs: list[tuple[str, set[str]]] = [(f"{L.DOMAIN_PREFIX}{d}", {"true"})
                                            for d in self.domains]
        if self.vendor:
            reqs.append((L.ACCELERATOR_VENDOR, {self.vendor}))
        if self.mode:
            reqs.append((L.DEPLOYMENT_MODE, {self.mode}))
        if self.max_vram_gib is not None:
            reqs.append((L.VRAM_TIER, set(L.tiers_at_most(self.max_vram_gib))))
        return reqs

    def label_selector(self) -> str:
        """The Kubernetes label selector for the criteria labels can express ("" for none)."""
        parts = []
        for key, values in self.label_requirements():
            if len(values) == 1:
                parts.append(f"{key}={next(iter(values))}")
            else:
                ordered = [t for _, t in L.VRAM_TIERS if t in values]
                parts.append(f"{key} in ({','.join(ordered)})")
        return ",".join(parts)


@dataclass(frozen=True)
class Facets:
    """What a query looks at, for an LLMModel or for a model known only by its tool."""

    labels: dict[str, str]
    context_window_k: int | None
    supports_thinking: bool
    phase: str | None


def facets(model: LLMModel) -> Facets:
    """The model's facets; its labels are completed with discovery labels (files carry none)."""
    return Facets(labels={**(model.metadata.labels or {}), **L.discovery_labels(model.spec)},
                  context_window_k=model.spec.context_window_k,
                  supports_thinking=model.spec.supports_thinking,
                  phase=model.status.phase if model.status else None)


def accepts(query: Query, found: Facets) -> bool:
    for key, allowed in query.label_requirements():
        if found.labels.get(key) not in allowed:
            return False
    if query.min_context_k is not None and (found.context_window_k or 0) < query.min_context_k:
        return False
    if query.thinking is not None and found.supports_thinking != query.thinking:
        return False
    return ANY_PHASE in query.phases or found.phase in query.phases


def matches(model: LLMModel, query: Query) -> bool:
    return accepts(query, facets(model))


def select(models: Iterable[LLMModel], query: Query) -> list[LLMModel]:
    """Matching models in a stable order (namespace, then name)."""
    found = [m for m in models if matches(m, query)]
    return sorted(found, key=lambda m: (m.namespace, m.name))


def served_context(model: LLMModel) -> int | None:
    """The context, in tokens, the model is served with.

    A self-hosted model's engine allocates what its engineArgs say (ctx-size), which may be
    less than the model's contextWindowK.
    """
    spec = model.spec
    if spec.is_remote:
        return spec.context_window_k * 1024 if spec.context_window_k else None
    return engine(spec.inference_engine).served_context_tokens(spec)


def summary(model: LLMModel) -> dict[str, Any]:
    """What a caller needs to pick a model, as plain data (CLI output and MCP tool)."""
    spec, status = model.spec, model.status
    return {
        "name": model.name,
        "namespace": model.namespace,
        "toolName": spec.mcp_exposure.tool_name if spec.mcp_exposure.enabled else None,
        "modelId": spec.model_id,
        "domains": list(spec.domains or []),
        "contextWindowK": spec.context_window_k,
        "servedContextTokens": served_context(model),
        "supportsThinking": spec.supports_thinking,
        "vendor": None if spec.is_remote else spec.accelerator_vendor,
        "mode": spec.deployment_mode,
        "vramPerAcceleratorGiB": (None if spec.is_remote
                                  else spec.resources.vram_per_accelerator_gi_b),
        "status": status.phase if status else None,
        "endpoint": status.endpoint if status else None,
    }
