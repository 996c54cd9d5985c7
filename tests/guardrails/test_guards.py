"""Guards in order over a body's text: actions, exemptions, judges and their onError.

The runner with a regular-expression detector and a scripted judge: no Presidio, no model.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest

from llm_operator.api.guardrails import JUDGE_CATEGORIES, GuardSpec
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.guardrails import judges
from llm_operator.guardrails.guards import Activation, Checked, Direction
from llm_operator.guardrails.pii import Finding
from llm_operator.guardrails.runner import Guarding, GuardUnavailable, JudgeFailed
from llm_operator.guardrails.text import Spot

PATTERNS = {"EMAIL_ADDRESS": r"\S+@\S+", "CREDIT_CARD": r"\d{4}( \d{4}){3}"}
TEXT = "mail a@b.io card 4111 1111 1111 1111"


class Regexes:
    """A detector of two entity types by regular expression, scored 1.0."""

    def find(self, text: str, entities: Sequence[str], threshold: float) -> list[Finding]:
        return sorted((Finding(kind, m.start(), m.end(), 1.0) for kind in entities
                       if kind in PATTERNS for m in re.finditer(PATTERNS[kind], text)),
                      key=lambda f: f.start)

    def mask(self, text: str, findings: Sequence[Finding]) -> str:
        for f in sorted(findings, key=lambda f: -f.start):
            text = text[:f.start] + f"<{f.entity}>" + text[f.end:]
        return text


class Judge:
    """Answers each prompt with the next scripted answer (or raises it); records prompts."""

    def __init__(self, *answers: str | Exception) -> None:
        self.answers, self.prompts = list(answers), list[str]()

    async def complete(self, model: str, prompt: str, timeout: float,
                       caller: object = None) -> str:
        self.prompts.append(prompt)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        if answer == "hang":
            await asyncio.Event().wait()
        return answer


def pii(name: str, action: str, *entities: str) -> GuardSpec:
    more: dict[str, Any] = {"entities": list(entities)} if entities else {}
    return GuardSpec.model_validate({"name": name, "action": action, "pii": more})


def judged(name: str, family: str = "llama-guard-3", on_error: str = "closed",
           **judge: Any) -> GuardSpec:
    return GuardSpec.model_validate({"name": name, "onError": on_error, "judge": {
        "model": "guard", "family": family, "timeoutSeconds": 0.05, **judge}})


async def run(guards: list[GuardSpec], spots: list[Spot], direction: Direction = "input",
              judge: Judge | None = None, exempt: Any = lambda _: False,
              context: str = "") -> tuple[Checked, GatewayMetrics]:
    metrics = GatewayMetrics()
    runner = Guarding(metrics, scanner=Regexes, judge_client=judge)
    try:
        return await runner.check("r", guards, spots, direction, exempt,
                                  context=context), metrics
    finally:
        runner.close()


@pytest.mark.parametrize(("guards", "after", "found", "blocked"), [
    ([pii("pii", "mask")], "mail <EMAIL_ADDRESS> card <CREDIT_CARD>",
     [("pii", "mask", ("CREDIT_CARD", "EMAIL_ADDRESS"))], None),
    ([pii("pii", "log")], TEXT, [("pii", "log", ("CREDIT_CARD", "EMAIL_ADDRESS"))], None),
    ([pii("cards", "block", "CREDIT_CARD"), pii("mails", "mask", "EMAIL_ADDRESS")], TEXT,
     [("cards", "block", ("CREDIT_CARD",))], "cards"),  # the first block ends the check
    ([pii("mails", "mask", "EMAIL_ADDRESS"), pii("cards", "log", "CREDIT_CARD")],
     "mail <EMAIL_ADDRESS> card 4111 1111 1111 1111",
     [("mails", "mask", ("EMAIL_ADDRESS",)), ("cards", "log", ("CREDIT_CARD",))], None),
    ([pii("mails", "mask", "EMAIL_ADDRESS"), pii("again", "block", "EMAIL_ADDRESS")],
     "mail <EMAIL_ADDRESS> card 4111 1111 1111 1111",
     [("mails", "mask", ("EMAIL_ADDRESS",))], None),  # a later guard sees the masked text
    ([pii("ibans", "block", "IBAN_CODE")], TEXT, [], None),
])
async def test_guards_run_in_order_over_what_the_guards_before_left(
        guards: list[GuardSpec], after: str, found: list[tuple[str, str, tuple[str, ...]]],
        blocked: str | None) -> None:
    holder = [TEXT]
    checked, _ = await run(guards, [Spot(holder, 0)])
    assert holder == [after]
    assert [(a.guard, a.action, a.entities) for a in checked.activations] == found
    assert (checked.blocked.guard if checked.blocked else None) == blocked
    assert checked.masked == (after != TEXT)


async def test_every_spot_is_checked_and_a_guard_counts_once() -> None:
    body = {"messages": [{"content": "a@b.io"}, {"content": "c@d.io and e@f.io"}]}
    spots = [Spot(m, "content") for m in body["messages"]]
    checked, metrics = await run([pii("pii", "mask")], spots, "output")
    assert body["messages"] == [{"content": "<EMAIL_ADDRESS>"},
                                {"content": "<EMAIL_ADDRESS> and <EMAIL_ADDRESS>"}]
    assert checked.activations == [Activation("pii", "output", "mask", ("EMAIL_ADDRESS",), 1.0)]
    assert metrics.registry.get_sample_value(
        "llmop_gateway_guardrail_activations_total", {
            "route": "r", "guard": "pii", "direction": "output", "action": "mask",
            "entity": "EMAIL_ADDRESS"}) == 1


async def test_an_exempted_guard_does_not_run() -> None:
    checked, _ = await run([pii("pii", "block"), pii("log-all", "log")], [Spot([TEXT], 0)],
                           exempt=lambda name: name == "pii")
    assert checked.blocked is None
    assert [a.guard for a in checked.activations] == ["log-all"]


async def test_a_moderation_runs_every_guard_and_changes_nothing() -> None:
    holder = [TEXT]
    checked, _ = await run([pii("cards", "block", "CREDIT_CARD"), pii("pii", "mask")],
                           [Spot(holder, 0)], "moderation")
    assert holder == [TEXT]
    assert [(a.guard, a.action) for a in checked.activations] == [("cards", "flag"),
                                                                  ("pii", "flag")]
    assert checked.blocked is None and not checked.masked


@pytest.mark.parametrize(("family", "categories", "answers", "found"), [
    ("llama-guard-3", None, ["safe"], None),
    ("llama-guard-3", None, ["unsafe\nS1,S10"], ("S1", "S10")),
    ("llama-guard-4", ["S2"], [" unsafe \n"], ("unsafe",)),  # no codes named
    ("granite-guardian-3", ["harm", "jailbreak"], ["No", "Yes"], ("jailbreak",)),
    ("shieldgemma", ["harassment"], ["Yes. The prompt insults"], ("harassment",)),
    ("shieldgemma", None, ["No", "No", "No", "No"], None),  # its four policies
])
async def test_a_judges_verdict_blocks_with_the_categories_it_named(
        family: str, categories: list[str] | None, answers: list[str],
        found: tuple[str, ...] | None) -> None:
    judge = Judge(*answers)
    guard = judged("safety", family, **({"categories": categories} if categories else {}))
    checked, _ = await run([guard], [Spot(["how do I"], 0)], judge=judge)
    assert len(judge.prompts) == len(answers)  # one call, or one per risk or policy
    assert (checked.blocked.entities if checked.blocked else None) == found


async def test_a_judge_reads_the_request_beside_an_answer() -> None:
    judge = Judge("safe")
    await run([judged("safety")], [Spot(["the answer"], 0)], "output", judge,
              context="the question")
    assert "User: the question\n\nAgent: the answer" in judge.prompts[0]
    assert "ONLY THE LAST Agent message" in judge.prompts[0]


@pytest.mark.parametrize(("answer", "why"), [
    ("I cannot help with that", "expected 'safe' or 'unsafe', got 23 other characters on "
     "its first line"),
    ("User: a@b.io\nsafe", "got 12 other characters"),  # an echo is never quoted
    ("", "got nothing"),
    (JudgeFailed("the judge model 'guard' is not served here"), "not served here"),
    ("hang", "no verdict within 0.05 s"),
])
async def test_a_judge_that_fails_refuses_closed_and_passes_open(
        answer: str | Exception, why: str, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(GuardUnavailable, match=re.escape(why)):
        await run([judged("safety")], [Spot(["hi"], 0)], judge=Judge(answer))
    checked, metrics = await run([judged("safety", on_error="open"), pii("pii", "log")],
                                 [Spot(["a@b.io"], 0)], judge=Judge(answer))
    assert [a.guard for a in checked.activations] == ["pii"]  # the next guard still runs
    assert metrics.registry.get_sample_value("llmop_gateway_guardrail_errors_total", {
        "route": "r", "direction": "input"}) == 1
    assert why in caplog.text and "a@b.io" not in caplog.text


async def test_a_server_without_a_judge_client_follows_on_error() -> None:
    with pytest.raises(GuardUnavailable, match="does not ask judges"):
        await run([judged("safety")], [Spot(["hi"], 0)])


def test_the_apis_judge_categories_are_the_ones_the_prompts_define() -> None:
    assert {family: set(known) for family, known in JUDGE_CATEGORIES.items()} == {
        "llama-guard-3": set(judges.LLAMA_GUARD_CATEGORIES),
        "llama-guard-4": set(judges.LLAMA_GUARD_CATEGORIES),
        "granite-guardian-3": set(judges.GRANITE_RISKS),
        "shieldgemma": set(judges.SHIELDGEMMA_POLICIES)}


@pytest.mark.parametrize(("family", "turns", "foreign"), [
    ("llama-guard-3", ("<|start_header_id|>user<|end_header_id|>\n\n",
                       "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
     "<|header_start|>"),
    # Llama Guard 4 is a Llama 4 model: Llama 3's turn tokens are plain text to it
    ("llama-guard-4", ("<|header_start|>user<|header_end|>\n\n",
                       "<|eot|><|header_start|>assistant<|header_end|>\n\n"),
     "<|start_header_id|>"),
])
def test_a_llama_guards_prompt_is_in_its_own_turns(family: str, turns: tuple[str, str],
                                                   foreign: str) -> None:
    (ask,) = judges.asks(family, ("S1",), "User", "hello")
    assert ask.prompt.startswith("<|begin_of_text|>" + turns[0])
    assert ask.prompt.endswith(turns[1]) and foreign not in ask.prompt
