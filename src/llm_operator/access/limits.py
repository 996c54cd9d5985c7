"""Token-bucket rate limits: requests per minute, and tokens reserved before and settled after."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

CHARS_PER_TOKEN = 4  # the usual estimate for English text with BPE tokenizers
MAX_TOKEN_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


class TokenBucket:
    """``per_minute`` units per minute with a burst of the same size.

    ``take()`` either spends one unit or returns how many seconds until one is available.
    ``spend(n)`` charges units after the fact (tokens counted from the response) and may
    drive the balance negative, which then delays later requests.
    """

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._level = self.capacity
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._at) * self.rate)
        self._at = now

    def wait_seconds(self, units: float = 1.0) -> float:
        """Seconds until ``units`` are available (0 when they are now)."""
        self._refill()
        missing = units - self._level
        return 0.0 if missing <= 0 else missing / self.rate

    def take(self, units: float = 1.0) -> float:
        """Spend ``units`` if available and return 0, else return the wait in seconds."""
        wait = self.wait_seconds(units)
        if wait == 0.0:
            self._level -= units
        return wait

    def spend(self, units: float) -> None:
        """Charge ``units`` (negative: give back, never above the burst)."""
        self._refill()
        self._level = min(self.capacity, self._level - units)


def _text_length(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list):
        return sum(_text_length(v) for v in value)
    if isinstance(value, dict):  # a message or a content part: only its text counts
        return _text_length(value.get("content")) + _text_length(value.get("text"))
    return 0


def estimate_tokens(body: dict[str, Any]) -> int:
    """Tokens a request may use: its text (chars / 4) plus the output it asks for at most.

    What a tokens-per-minute limit reserves before sending; the response's usage settles
    it. Without a max-tokens field only the prompt is reserved.
    """
    text = sum(_text_length(body.get(k)) for k in ("messages", "prompt", "input"))
    prompt = max(1, math.ceil(text / CHARS_PER_TOKEN))
    asked = next((v for k in MAX_TOKEN_FIELDS if isinstance(v := body.get(k), int)
                  and v > 0), 0)
    return prompt + asked


@dataclass
class Reservation:
    """Tokens taken from buckets before a request; ``settle`` charges the real count once.

    Unsettled (an error, a cancelled client) it gives everything back.
    """

    taken: list[tuple[Spendable, float]] = field(default_factory=list)
    settled: bool = False

    def settle(self, used: float = 0.0) -> None:
        if self.settled:
            return
        self.settled = True
        for bucket, units in self.taken:
            bucket.spend(used - units)


class Spendable(Protocol):
    """What a reservation gives back to: a local bucket, or a shared one (Redis)."""

    def spend(self, units: float) -> None: ...


@dataclass
class Limits:
    """One party's allowance (a route, a client key): requests and tokens per minute."""

    name: str  # in the 429's message: "route 'gpt-5.5'", "key 'search-team'"
    rpm: TokenBucket | None = None
    tpm: TokenBucket | None = None
    ident: str = ""  # stable id of the party where limits are shared: "route:gpt-5.5"
    totals: tuple[int | None, int | None] = (None, None)  # configured rpm, tpm (all replicas)

    def wait_seconds(self, tokens: float) -> float:
        wait = self.rpm.wait_seconds() if self.rpm is not None else 0.0
        if self.tpm is not None:
            wait = max(wait, self.tpm.wait_seconds(min(tokens, self.tpm.capacity)))
        return wait

    def take(self, tokens: float, reservation: Reservation) -> None:
        if self.rpm is not None:
            self.rpm.spend(1.0)
        if self.tpm is not None:
            units = min(tokens, self.tpm.capacity)
            self.tpm.spend(units)
            reservation.taken.append((self.tpm, units))


def admit(parties: list[Limits], body: dict[str, Any], reservation: Reservation
          ) -> tuple[Limits, float] | None:
    """Take one request (and its estimated tokens) from every party, or none of them.

    None when the request may go; else the party that refuses it longest and the wait.
    """
    tokens = float(estimate_tokens(body)) if any(p.tpm for p in parties) else 0.0
    worst: tuple[Limits, float] | None = None
    for party in parties:
        wait = party.wait_seconds(tokens)
        if wait > 0 and (worst is None or wait > worst[1]):
            worst = (party, wait)
    if worst is not None:
        return worst
    for party in parties:
        party.take(tokens, reservation)
    return None


def limits(name: str, ident: str, *, rpm: int | None, tpm: int | None,
           clock: Callable[[], float], share: float = 1.0) -> Limits:
    """A party's limits; this process's buckets hold ``share`` of each (at least 1).

    With limits shared in Redis the local buckets are the fallback while it is down, and
    ``share`` is this replica's part of the whole.
    """
    def bucket(per_minute: int | None) -> TokenBucket | None:
        return TokenBucket(max(1, math.floor(per_minute * share)), clock) if per_minute \
            else None
    return Limits(name, bucket(rpm), bucket(tpm), ident, (rpm, tpm))


def retry_after_header(seconds: float) -> str:
    """A Retry-After value: whole seconds, at least 1."""
    return str(max(1, math.ceil(seconds)))
