"""A moderation endpoint in OpenAI's shape as a detector: its request, its answer read (pure).

OpenAI's ``POST /v1/moderations`` takes ``{model, input: [texts]}`` and answers one result
per text: ``flagged``, ``categories`` (true where flagged) and ``category_scores`` (0..1).
A guard counts the categories it chose, flagged by the endpoint's own thresholds or at its
``scoreThreshold``; an answer that is not of that shape is Unreadable (never quoted: it may
repeat the text).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from llm_operator.guardrails.judges import Unreadable


def moderation_request(model_id: str, texts: Sequence[str]) -> dict[str, Any]:
    """The body to send: every text of the request in one call."""
    return {"model": model_id, "input": list(texts)}


def _mapping(result: Any, name: str, index: int) -> dict[str, Any]:
    given = result.get(name) if isinstance(result, dict) else None
    if not isinstance(given, dict):
        raise Unreadable(f"results[{index}].{name} is not an object")
    return given


def flagged_categories(raw: bytes, expected: int, chosen: Sequence[str],
                       threshold: float | None) -> tuple[tuple[str, ...], float]:
    """The chosen categories the answer flags across its results, and their best score.

    ``expected``: how many texts were sent (one result each). Unreadable when the answer
    is not a moderation of that many texts.
    """
    try:
        results = json.loads(raw).get("results")
    except (ValueError, AttributeError):
        raise Unreadable("the answer is not a JSON object") from None
    if not isinstance(results, list) or len(results) != expected:
        raise Unreadable(f"expected {expected} result(s) in results, got "
                         f"{len(results) if isinstance(results, list) else 'none'}")
    found: set[str] = set()
    best = 0.0
    for index, result in enumerate(results):
        flags = _mapping(result, "categories", index)
        scores = _mapping(result, "category_scores", index)
        for category in chosen:
            score = scores.get(category, 0.0)
            if not isinstance(score, int | float) or isinstance(score, bool):
                raise Unreadable(f"results[{index}].category_scores.{category} is not a "
                                 "number")
            hit = flags.get(category) is True if threshold is None else score >= threshold
            if hit:
                found.add(category)
                best = max(best, float(score))
    return tuple(sorted(found)), best
