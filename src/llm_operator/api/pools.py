"""Pools across LLMModels: who belongs to which pool, and members that disagree."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel, ScalingSpec
from llm_operator.api.validation import Problem

Key = tuple[str, str]  # (namespace, name)

# What every member of a pool must declare alike: the field, and how to read it.
SHARED: tuple[tuple[str, Callable[[LLMModel], Any]], ...] = (
    ("spec.pool.maxLoaded", lambda m: m.spec.pool.max_loaded if m.spec.pool else None),
    ("spec.pool.memoryGiB", lambda m: m.spec.pool.memory_gi_b if m.spec.pool else None),
    ("spec.pool.minResidencySeconds",
     lambda m: m.spec.pool.min_residency_seconds if m.spec.pool else None),
    ("spec.pool.maxSwapsPerMinute",
     lambda m: m.spec.pool.max_swaps_per_minute if m.spec.pool else None),
    # one engine today (pool_rules: llamacpp), checked for when there are more
    ("spec.inferenceEngine", lambda m: m.spec.inference_engine),
    ("spec.acceleratorVendor", lambda m: m.spec.accelerator_vendor),
)


def pools(models: Iterable[LLMModel]) -> dict[Key, list[LLMModel]]:
    """Each pool (namespace, pool name) with its members in name order."""
    found: dict[Key, list[LLMModel]] = {}
    for model in models:
        if model.spec.pool is not None and not model.spec.is_remote:
            found.setdefault((model.namespace, model.spec.pool.name), []).append(model)
    return {key: sorted(members, key=lambda m: m.name) for key, members in found.items()}


def pool_problems(models: Sequence[LLMModel], where: str) -> dict[Key, list[Problem]]:
    """Problems of each pooled model, by (namespace, name), with the field named.

    A pool of one member shares nothing; a member whose pool settings, engine or vendor
    differ from the first member's (by name) cannot share its engine. ``where`` says where
    the other members were looked for ("among the documents given", "in the cluster").
    """
    out: dict[Key, list[Problem]] = {}
    for (namespace, name), members in pools(models).items():
        first = members[0]
        if len(members) == 1:
            out.setdefault((namespace, first.name), []).append(Problem(
                "spec.pool.name", f"pool {name} has no other member {where} (namespace "
                f"{namespace}): a pool shares one engine among several models; declare the "
                "others with the same pool, or remove pool"))
            continue
        for member in members[1:]:
            for field, read in SHARED:
                mine, theirs = read(member), read(first)
                if mine != theirs:
                    out.setdefault((namespace, member.name), []).append(Problem(
                        field, f"{_shown(mine)} here but {_shown(theirs)} in {first.name}: "
                        f"every member of pool {name} declares the same"))
        pinned = [m for m in members if m.spec.pool is not None and m.spec.pool.pinned]
        places = first.spec.pool.max_loaded if first.spec.pool is not None else 0
        if pinned and len(pinned) >= places and len(members) > places:
            for member in pinned:
                out.setdefault((namespace, member.name), []).append(Problem(
                    "spec.pool.pinned", f"{len(pinned)} members of pool {name} are pinned "
                    f"and maxLoaded is {places}: no place is left for its other members; "
                    "pin fewer, or raise maxLoaded"))
    return out


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def pool_scaling(members: Sequence[LLMModel]) -> ScalingSpec:
    """The replica bounds a pool's engine scales within, from its members' ``scaling``.

    At least as many replicas as the member asking most (``minReplicas``): zero only when
    every member allows it; at most as many as any member allows (``maxReplicas``); a
    replica added at the lowest ``scaleUpThreshold``; to zero only after the longest
    ``cooldownPeriodSeconds`` without a request for any member.
    """
    scalings = [m.spec.scaling for m in members]
    return ScalingSpec.model_validate({
        "minReplicas": max(s.min_replicas for s in scalings),
        "maxReplicas": max(s.max_replicas for s in scalings),
        "scaleUpThreshold": min(s.scale_up_threshold for s in scalings),
        "cooldownPeriodSeconds": max(s.cooldown_period_seconds for s in scalings),
        "prefetchImages": any(s.prefetch_images for s in scalings)})


def pool_autoscaled(members: Sequence[LLMModel]) -> bool:
    """Whether a pool's replicas are the autoscaler's to set (its bounds leave a choice)."""
    scaling = pool_scaling(members)
    return scaling.min_replicas != scaling.max_replicas
