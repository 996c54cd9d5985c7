"""A list of guards over a body's text: order, actions, exemptions, moderation (pure)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pytest

from llm_operator.api.guardrails import GuardSpec
from llm_operator.guardrails.guards import Activation, run_guards
from llm_operator.guardrails.pii import Finding
from llm_operator.guardrails.text import Spot

PATTERNS = {"EMAIL_ADDRESS": r"\S+@\S+", "CREDIT_CARD": r"\d{4}( \d{4}){3}"}


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


def guard(name: str, action: str, *entities: str) -> GuardSpec:
    pii: dict[str, Any] = {"entities": list(entities)} if entities else {}
    return GuardSpec.model_validate({"name": name, "action": action, "pii": pii})


TEXT = "mail a@b.io, card 4111 1111 1111 1111"


@pytest.mark.parametrize(("guards", "after", "found", "blocked"), [
    ([guard("pii", "mask")], "mail <EMAIL_ADDRESS> card <CREDIT_CARD>",
     [("pii", "mask", ("CREDIT_CARD", "EMAIL_ADDRESS"))], None),
    ([guard("pii", "log")], TEXT, [("pii", "log", ("CREDIT_CARD", "EMAIL_ADDRESS"))], None),
    ([guard("cards", "block", "CREDIT_CARD"), guard("mails", "mask", "EMAIL_ADDRESS")], TEXT,
     [("cards", "block", ("CREDIT_CARD",))], "cards"),  # the first block ends the check
    ([guard("mails", "mask", "EMAIL_ADDRESS"), guard("cards", "log", "CREDIT_CARD")],
     "mail <EMAIL_ADDRESS> card 4111 1111 1111 1111",
     [("mails", "mask", ("EMAIL_ADDRESS",)), ("cards", "log", ("CREDIT_CARD",))], None),
    ([guard("mails", "mask", "EMAIL_ADDRESS"), guard("again", "block", "EMAIL_ADDRESS")],
     "mail <EMAIL_ADDRESS> card 4111 1111 1111 1111",
     [("mails", "mask", ("EMAIL_ADDRESS",))], None),  # a later guard sees the masked text
    ([guard("ibans", "block", "IBAN_CODE")], TEXT, [], None),
])
def test_guards_run_in_order_over_what_the_guards_before_left(
        guards: list[GuardSpec], after: str, found: list[tuple[str, str, tuple[str, ...]]],
        blocked: str | None) -> None:
    holder = [TEXT.replace(",", "")]
    checked = run_guards(guards, [Spot(holder, 0)], Regexes(), "input")
    assert holder == [after.replace(",", "")]
    assert [(a.guard, a.action, a.entities) for a in checked.activations] == found
    assert (checked.blocked.guard if checked.blocked else None) == blocked
    assert checked.masked == (after != TEXT)


def test_every_spot_is_checked_and_a_guard_counts_once() -> None:
    body = {"messages": [{"content": "a@b.io"}, {"content": "c@d.io and e@f.io"}]}
    spots = [Spot(m, "content") for m in body["messages"]]
    checked = run_guards([guard("pii", "mask")], spots, Regexes(), "output")
    assert body["messages"] == [{"content": "<EMAIL_ADDRESS>"},
                                {"content": "<EMAIL_ADDRESS> and <EMAIL_ADDRESS>"}]
    assert checked.activations == [Activation("pii", "output", "mask", ("EMAIL_ADDRESS",), 1.0)]


def test_an_exempted_guard_does_not_run() -> None:
    holder = [TEXT]
    checked = run_guards([guard("pii", "block"), guard("log-all", "log")],
                         [Spot(holder, 0)], Regexes(), "input", lambda name: name == "pii")
    assert checked.blocked is None
    assert [a.guard for a in checked.activations] == ["log-all"]


def test_a_moderation_runs_every_guard_and_changes_nothing() -> None:
    holder = [TEXT]
    checked = run_guards([guard("cards", "block", "CREDIT_CARD"), guard("pii", "mask")],
                         [Spot(holder, 0)], Regexes(), "moderation")
    assert holder == [TEXT]
    assert [(a.guard, a.action) for a in checked.activations] == [("cards", "flag"),
                                                                  ("pii", "flag")]
    assert checked.blocked is None and not checked.masked
