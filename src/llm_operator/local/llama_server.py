"""What `llmop up` reads from llama-server: its load (/metrics, /slots), why it stopped (log)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")
# Lines of llama-server's log that say why it stopped, most specific first.
REASONS = (
    re.compile(r"error loading model: (.+)"),
    re.compile(r"^(?:\S+: )?(error: .+)"),
    re.compile(r"(failed to (?:load|open|read) .+)"),
    re.compile(r"(couldn't bind .+|bind failed.*)"),
)
START_MARK = "--- "  # the line the supervisor writes before each start


@dataclass(frozen=True)
class Load:
    """How busy a llama-server is: slots in use, requests waiting, tokens per second."""

    slots: int = 0
    busy: int = 0
    waiting: int = 0
    tokens_per_second: float = 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"slots": self.slots, "busy": self.busy, "waiting": self.waiting,
                "tokensPerSecond": round(self.tokens_per_second, 1)}


def metric_values(text: str) -> dict[str, float]:
    """Prometheus text exposition as {sample name: value} (labels dropped; last one wins)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        found = SAMPLE.match(line)
        if found is None:
            continue
        try:
            values[found.group(1)] = float(found.group(2))
        except ValueError:
            continue
    return values


def slot_counts(slots: Any) -> tuple[int, int, int]:
    """(slots, busy slots, tokens the busy slots generated so far) from GET /slots."""
    if not isinstance(slots, list):
        return 0, 0, 0
    busy = [s for s in slots if isinstance(s, dict) and s.get("is_processing")]
    decoded = 0
    for slot in busy:
        for step in slot.get("next_token") or ():
            if isinstance(step, dict) and isinstance(step.get("n_decoded"), int):
                decoded += step["n_decoded"]
    return len(slots), len(busy), decoded


class Meter:
    """Turns successive samples of /metrics and /slots into a Load with a token rate.

    llama-server adds a request's tokens to ``tokens_predicted_total`` only when it ends;
    the tokens of requests still generating come from /slots, so the rate moves while a
    long answer streams.
    """

    def __init__(self) -> None:
        self._last: tuple[float, float] | None = None  # (time, tokens)

    def sample(self, now: float, metrics: str, slots: Any) -> Load:
        values = metric_values(metrics)
        count, busy, decoding = slot_counts(slots)
        tokens = values.get("llamacpp:tokens_predicted_total", 0.0) + decoding
        rate = 0.0
        if self._last is not None and now > self._last[0]:
            rate = max(0.0, (tokens - self._last[1]) / (now - self._last[0]))
        self._last = (now, tokens)
        return Load(slots=count, busy=busy,
                    waiting=int(values.get("llamacpp:requests_deferred", 0.0)),
                    tokens_per_second=rate)


def failure_reason(log_lines: Iterable[str]) -> str | None:
    """Why llama-server stopped, in its own words, from its log since the last start."""
    lines: list[str] = []
    for line in log_lines:
        if line.startswith(START_MARK):
            lines = []
        else:
            lines.append(line.rstrip())
    for pattern in REASONS:
        for line in lines:
            found = pattern.search(line)
            if found is not None:
                return found.group(1).strip()
    return None
