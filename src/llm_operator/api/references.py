"""References between LLMModels: a guard's judge or moderation model must be declared too."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import Problem


def names_of(model: LLMModel) -> tuple[str, ...]:
    """How clients (and a guard's judge) may name the model: modelId or namespace/name."""
    return (model.spec.model_id, f"{model.namespace}/{model.name}")


def declared(models: Iterable[LLMModel]) -> frozenset[str]:
    """Every name the models answer to."""
    return frozenset(n for m in models for n in names_of(m))


def declared_in(documents: Iterable[dict[str, Any]]) -> frozenset[str]:
    """``declared`` for LLMModel documents as the API server returns them."""
    names = set()
    for doc in documents:
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        names.add(f"{meta.get('namespace')}/{meta.get('name')}")
        if isinstance(spec.get("modelId"), str):
            names.add(spec["modelId"])
    return frozenset(names)


def unknown_guard_models(model: LLMModel, known: Collection[str], where: str
                         ) -> list[Problem]:
    """A problem for each guard whose judge or moderation model names no model in ``known``.

    ``where`` says where the model was looked for ("among the documents given", "in the
    cluster"): a guard model that is not declared there fails every check it is asked for,
    and its guard then refuses every request (onError closed) or lets every one through
    (open).
    """
    rails = model.spec.guardrails
    if rails is None:
        return []
    problems = []
    for direction, guards in (("input", rails.input), ("output", rails.output)):
        for i, guard in enumerate(guards or ()):
            asked = guard.asked_model
            if asked is None or asked in known:
                continue
            problems.append(Problem(
                f"spec.guardrails.{direction}[{i}].{guard.detector}.model",
                f"guard {guard.name}: no LLMModel {where} is {asked!r} (a guard's "
                f"{guard.detector} model is named by its modelId or namespace/name): declare "
                "that model too, or fix the name"))
    return problems
