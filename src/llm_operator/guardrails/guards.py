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


def applied(guard: GuardSpec, spots: Sequence[Spot], found: Sequence[Sequence[Finding]],
            direction: Direction, mask: Callable[[str, Sequence[Finding]], str]
            ) -> tuple[tuple[str, ...], float, bool]:
    """A PII guard's findings (``found``, spot by spot), masked where it masks.

    Entity types, best score, whether a spot changed. Never masked for a moderation.
    """
    entities: set[str] = set()
    score, masked = 0.0, False
    for spot, findings in zip(spots, found, strict=True):
        if not findings:
            continue
        entities.update(f.entity for f in findings)
        score = max(score, *(f.score for f in findings))
        if guard.action == "mask" and direction != "moderation":
            spot.replace(mask(spot.text, findings))
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
