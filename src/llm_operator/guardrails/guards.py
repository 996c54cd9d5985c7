"""A list of guards run over a body's text: what each found, masked, or the one that blocked.

Pure: the detector is passed in (guardrails/pii.py's scanner, in a worker thread).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def pii_found(guard: GuardSpec, spots: Sequence[Spot], detector: Detector,
              direction: Direction) -> tuple[tuple[str, ...], float, bool]:
    """A PII guard over every spot's text: entity types found, best score, whether masked.

    A masking guard rewrites the spots in place (never for a moderation).
    """
    assert guard.pii is not None
    entities: set[str] = set()
    score, masked = 0.0, False
    for spot in spots:
        text = spot.text
        found = detector.find(text, guard.pii.wanted, guard.pii.score_threshold)
        if not found:
            continue
        entities.update(f.entity for f in found)
        score = max(score, *(f.score for f in found))
        if guard.action == "mask" and direction != "moderation":
            spot.replace(detector.mask(text, found))
            masked = True
    return tuple(sorted(entities)), score, masked


def record(checked: Checked, guard: GuardSpec, direction: Direction,
           entities: tuple[str, ...], score: float) -> bool:
    """A guard that found ``entities`` (none: nothing) noted; whether it blocked.

    A block ends the check. A moderation only reports: its action is ``flag``.
    """
    if not entities:
        return False
    action = "flag" if direction == "moderation" else guard.action
    found = Activation(guard.name, direction, action, entities, score)
    checked.activations.append(found)
    if action == "block":
        checked.blocked = found
    return action == "block"
