"""A list of guards run over a body's text: what each found, masked, or the one that blocked.

Pure: the detector is passed in (guardrails/pii.py's scanner, in a worker thread).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from llm_operator.api.guardrails import GuardSpec
from llm_operator.guardrails.pii import Finding
from llm_operator.guardrails.text import Spot

Direction = Literal["input", "output", "moderation"]


class Detector(Protocol):
    """What finds and masks personal data (guardrails/pii.py's PiiScanner)."""

    def find(self, text: str, entities: Sequence[str], threshold: float) -> list[Finding]: ...

    def mask(self, text: str, findings: Sequence[Finding]) -> str: ...


@dataclass(frozen=True)
class Activation:
    """A guard that found something: its name, direction, action and the entity types."""

    guard: str
    direction: Direction
    action: str
    entities: tuple[str, ...]
    score: float  # the highest score of what it found (Presidio's, 0..1)


@dataclass
class Checked:
    """What a body's guards did: each activation, the one that blocked, whether text changed."""

    activations: list[Activation] = field(default_factory=list)
    blocked: Activation | None = None
    masked: bool = False


def run_guards(guards: Sequence[GuardSpec], spots: Sequence[Spot], detector: Detector,
               direction: Direction, exempt: Callable[[str], bool] = lambda _: False
               ) -> Checked:
    """Each guard in order over every spot's text (as the guards before left it).

    ``exempt``: guards the client's key is exempted from. The first guard that blocks
    ends the check; a masking guard rewrites the spots in place. A moderation only
    reports: every guard runs, its action recorded as ``flag``, nothing changed.
    """
    report = direction == "moderation"
    checked = Checked()
    for guard in guards:
        if exempt(guard.name):
            continue
        entities: list[str] = []
        score = 0.0
        for spot in spots:
            text = spot.text
            found = detector.find(text, guard.pii.wanted, guard.pii.score_threshold)
            if not found:
                continue
            entities += (f.entity for f in found)
            score = max(score, *(f.score for f in found))
            if guard.action == "mask" and not report:
                spot.replace(detector.mask(text, found))
                checked.masked = True
        if not entities:
            continue
        activation = Activation(guard.name, direction, "flag" if report else guard.action,
                                tuple(sorted(set(entities))), score)
        checked.activations.append(activation)
        if activation.action == "block":
            checked.blocked = activation
            return checked
    return checked
