"""A moderation endpoint as a detector: its answer read, and the runner asking it.

Pure parsing of OpenAI's moderation shape, then the runner with a scripted endpoint: no
server, no model.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any

import pytest

from llm_operator.api.guardrails import MODERATION_CATEGORIES, GuardSpec
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.guardrails.judges import Unreadable
from llm_operator.guardrails.moderation import flagged_categories, moderation_request
from llm_operator.guardrails.runner import Guarding, GuardUnavailable, JudgeFailed
from llm_operator.guardrails.text import Spot


def result(**scores: float) -> dict[str, Any]:
    """One result: the categories scored, flagged at 0.5 as OpenAI's thresholds might."""
    return {"flagged": any(s >= 0.5 for s in scores.values()),
            "categories": {c.replace("_", "/"): s >= 0.5 for c, s in scores.items()},
            "category_scores": {c.replace("_", "/"): s for c, s in scores.items()}}


def answer(*results: dict[str, Any]) -> bytes:
    return json.dumps({"id": "modr-1", "results": list(results)}).encode()


ALL = MODERATION_CATEGORIES


@pytest.mark.parametrize(("raw", "chosen", "threshold", "found"), [
    (answer(result(hate=0.1)), ALL, None, ((), 0.0)),
    (answer(result(hate=0.7, violence=0.2)), ALL, None, (("hate",), 0.7)),
    (answer(result(hate=0.7)), ("violence",), None, ((), 0.0)),  # not chosen
    (answer(result(hate=0.3)), ALL, 0.25, (("hate",), 0.3)),  # ours, below its flag
    (answer(result(hate=0.7)), ALL, 0.9, ((), 0.0)),  # its flag, below ours
    # several texts: what any of them flags, the best score
    (answer(result(hate=0.6), result(violence_graphic=0.8)), ALL, None,
     (("hate", "violence/graphic"), 0.8)),
    # a category the answer leaves out is not flagged (text-moderation has no illicit)
    (answer(result(hate=0.1)), ("illicit",), 0.1, ((), 0.0)),
])
def test_the_chosen_categories_it_flags_and_their_best_score(
        raw: bytes, chosen: tuple[str, ...], threshold: float | None,
        found: tuple[tuple[str, ...], float]) -> None:
    texts = len(json.loads(raw)["results"])
    assert flagged_categories(raw, texts, chosen, threshold) == found


@pytest.mark.parametrize(("raw", "why"), [
    (b"<html>busy</html>", "not a JSON object"),
    (b"[1, 2]", "not a JSON object"),
    (answer(), "expected 1 result(s) in results, got 0"),
    (b'{"error": {"message": "no"}}', "got none"),
    (answer({"flagged": True, "categories": ["hate"], "category_scores": {}}),
     "results[0].categories is not an object"),
    (answer({"categories": {"hate": True}, "category_scores": {"hate": "0.9"}}),
     "results[0].category_scores.hate is not a number"),
])
def test_an_answer_that_is_not_a_moderation_is_unreadable(raw: bytes, why: str) -> None:
    with pytest.raises(Unreadable, match=re.escape(why)):
        flagged_categories(raw, 1, ALL, None)


def test_every_text_goes_in_one_request() -> None:
    assert moderation_request("omni-moderation-latest", ["a", "b"]) == {
        "model": "omni-moderation-latest", "input": ["a", "b"]}


class Endpoint:
    """Answers each moderation with the next scripted answer (or raises it)."""

    def __init__(self, *answers: bytes | Exception | str) -> None:
        self.answers, self.asked = list(answers), list[list[str]]()

    async def complete(self, model: str, prompt: str, timeout: float,
                       caller: object = None) -> str:
        raise AssertionError("a moderation guard asks no completion")

    async def moderate(self, model: str, texts: Sequence[str], timeout: float,
                       caller: object = None) -> bytes:
        self.asked.append(list(texts))
        given = self.answers.pop(0)
        if isinstance(given, Exception):
            raise given
        if given == "hang":
            await asyncio.Event().wait()
        assert isinstance(given, bytes)
        return given


def guard(on_error: str = "closed", **more: Any) -> GuardSpec:
    return GuardSpec.model_validate({"name": "policy", "onError": on_error, "moderation": {
        "model": "omni-moderation-latest", "timeoutSeconds": 0.05, **more}})


async def check(spec: GuardSpec, endpoint: Endpoint, *texts: str) -> tuple[Any, Any]:
    metrics = GatewayMetrics()
    runner = Guarding(metrics, judge_client=endpoint)
    try:
        checked = await runner.check("r", [spec], [Spot([t], 0) for t in texts], "input",
                                     lambda _: False)
    finally:
        runner.close()
    return checked, metrics


async def test_the_texts_are_asked_at_once_and_what_it_flags_blocks() -> None:
    endpoint = Endpoint(answer(result(hate=0.1), result(violence=0.9)))
    checked, _ = await check(guard(), endpoint, "first", "  ", "second")
    assert endpoint.asked == [["first", "second"]]  # blank text is not sent
    assert checked.blocked is not None
    assert (checked.blocked.entities, checked.blocked.score) == (("violence",), 0.9)


async def test_nothing_to_check_asks_nothing() -> None:
    endpoint = Endpoint()
    checked, _ = await check(guard(), endpoint, "", "\n")
    assert (endpoint.asked, checked.activations) == ([], [])


@pytest.mark.parametrize("failure", [JudgeFailed("omni: HTTP 500"), "hang",
                                     b'{"results": "none"}'])
@pytest.mark.parametrize("on_error", ["closed", "open"])
async def test_an_endpoint_that_fails_follows_on_error(failure: Any, on_error: str) -> None:
    endpoint = Endpoint(failure)
    if on_error == "closed":
        with pytest.raises(GuardUnavailable, match="guard 'policy': moderation "
                                                   "omni-moderation-latest: "):
            await check(guard(on_error), endpoint, "a text")
        return
    checked, metrics = await check(guard(on_error), endpoint, "a text")
    assert checked.activations == []
    assert metrics.guard_errors.labels("r", "input")._value.get() == 1
