"""The console's live figures: per route, a rolling series of points from the gateway's registry.

Every few seconds the gateway's cumulative counters and histograms are read
(``totals``) and the difference with the last reading becomes one point per route:
requests/s, errors/s, latency p50 and p99, time to first token p50, tokens/s, the
share of prompt tokens the engine served from its prefix cache (where it reports it), and
the flow-control queue per band and slots busy as they are at the reading. Quantiles
come from the histogram's bucket counts over the interval, as Prometheus's
``histogram_quantile`` computes them. No Prometheus server is needed.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

REQUESTS = "llmop_gateway_requests"
LATENCY = "llmop_gateway_request_duration_seconds"
TTFT = "llmop_gateway_time_to_first_token_seconds"
TOKENS = "llmop_gateway_tokens"
CACHED = "llmop_gateway_cached_prompt_tokens"
QUEUE = "llmop_gateway_queue_depth"
GUARDS = "llmop_gateway_guardrail_activations"
KEY_REQUESTS = "llmop_gateway_key_requests"
KEY_TOKENS = "llmop_gateway_key_tokens"
KEY_SPEND = "llmop_gateway_key_spend_usd"
# (route, guard, direction, action, entity type): what a guard found, never the text
Activation = tuple[str, str, str, str, str]


@dataclass
class Totals:
    """One route's cumulative figures at one reading."""

    requests: float = 0.0
    errors: float = 0.0  # answered 5xx
    latency: dict[float, float] = field(default_factory=dict)  # bucket bound -> count
    ttft: dict[float, float] = field(default_factory=dict)
    completion_tokens: float = 0.0
    prompt_tokens: float = 0.0
    cached_tokens: float = 0.0  # of the prompt tokens, from the engine's prefix cache
    queue: dict[str, float] = field(default_factory=dict)  # band -> waiting now
    busy: float | None = None  # requests at the engines now (None: not known)
    slots: int | None = None  # their slots (None: not known)


@dataclass(frozen=True)
class Point:
    """One interval of one route."""

    at: float  # seconds since the epoch, the interval's end
    requests_per_s: float
    errors_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    ttft_p50_ms: float | None
    tokens_per_s: float
    queue: Mapping[str, float]
    cache_hit_pct: float | None = None  # None: no prompt tokens in the interval
    busy: float | None = None
    slots: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"at": self.at, "requestsPerSecond": self.requests_per_s,
                "errorsPerSecond": self.errors_per_s, "p50Ms": self.p50_ms,
                "p99Ms": self.p99_ms, "ttftP50Ms": self.ttft_p50_ms,
                "tokensPerSecond": self.tokens_per_s, "queue": dict(self.queue),
                "queued": sum(self.queue.values()), "cacheHitPercent": self.cache_hit_pct,
                "busy": self.busy, "slots": self.slots}


def _bound(text: str) -> float:
    return math.inf if text == "+Inf" else float(text)


def totals(families: Iterable[Any]) -> dict[str, Totals]:
    """Each route's cumulative figures from a registry's ``collect()``."""
    out: dict[str, Totals] = {}

    def of(route: str) -> Totals:
        return out.setdefault(route, Totals())

    for family in families:
        name = family.name
        for sample in family.samples:
            labels = sample.labels
            route = labels.get("route")
            if route is None:
                continue
            if name == REQUESTS and sample.name.endswith("_total"):
                of(route).requests += sample.value
                if labels.get("status", "").startswith("5"):
                    of(route).errors += sample.value
            elif name in (LATENCY, TTFT) and sample.name.endswith("_bucket"):
                buckets = of(route).latency if name == LATENCY else of(route).ttft
                buckets[_bound(labels["le"])] = sample.value
            elif name == TOKENS and sample.name.endswith("_total"):
                if labels.get("kind") == "completion":
                    of(route).completion_tokens += sample.value
                elif labels.get("kind") == "prompt":
                    of(route).prompt_tokens += sample.value
            elif name == CACHED and sample.name.endswith("_total"):
                of(route).cached_tokens += sample.value
            elif name == QUEUE:
                of(route).queue[labels.get("band", "default")] = sample.value
    return out


def quantile(q: float, before: Mapping[float, float], after: Mapping[float, float]
             ) -> float | None:
    """The ``q`` quantile of what the histogram saw between two readings, None if nothing.

    Cumulative bucket counts by upper bound; linear within the bucket the rank falls in;
    the last finite bound when it falls in +Inf.
    """
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    lower, below = 0.0, 0.0
    for bound, count in zip(bounds, counts, strict=True):
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def point(at: float, seconds: float, before: Totals, after: Totals) -> Point:
    """The interval between two readings of one route, ``seconds`` long."""
    span = max(seconds, 1e-9)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    prompt = after.prompt_tokens - before.prompt_tokens
    cached = max(after.cached_tokens - before.cached_tokens, 0.0)

    return Point(
        at=at,
        requests_per_s=round(max(after.requests - before.requests, 0.0) / span, 3),
        errors_per_s=round(max(after.errors - before.errors, 0.0) / span, 3),
        p50_ms=ms(quantile(0.5, before.latency, after.latency)),
        p99_ms=ms(quantile(0.99, before.latency, after.latency)),
        ttft_p50_ms=ms(quantile(0.5, before.ttft, after.ttft)),
        tokens_per_s=round(max(after.completion_tokens - before.completion_tokens, 0.0)
                           / span, 2),
        queue=dict(after.queue),
        cache_hit_pct=round(min(cached / prompt, 1.0) * 100, 1) if prompt > 0 else None,
        busy=after.busy, slots=after.slots)


def activations(families: Iterable[Any]) -> dict[Activation, float]:
    """Every guard's activations so far, by route, guard, direction, action, entity type."""
    out: dict[Activation, float] = {}
    for family in families:
        if family.name != GUARDS:
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                labels = sample.labels
                out[(labels["route"], labels["guard"], labels["direction"], labels["action"],
                     labels["entity"])] = sample.value
    return out


@dataclass
class KeyUse:
    """One client key's figures so far: requests by status, tokens, this period's spend."""

    requests: dict[str, float] = field(default_factory=dict)
    tokens: dict[str, float] = field(default_factory=dict)  # prompt, completion
    spend_usd: float | None = None


def key_use(families: Iterable[Any], key: str) -> KeyUse:
    """What the gateway's registry says of one key (by its id)."""
    use = KeyUse()
    for family in families:
        if family.name not in (KEY_REQUESTS, KEY_TOKENS, KEY_SPEND):
            continue
        for sample in family.samples:
            if sample.labels.get("key") != key:
                continue
            if family.name == KEY_REQUESTS and sample.name.endswith("_total"):
                use.requests[sample.labels["status"]] = sample.value
            elif family.name == KEY_TOKENS and sample.name.endswith("_total"):
                use.tokens[sample.labels["kind"]] = sample.value
            elif family.name == KEY_SPEND:
                use.spend_usd = sample.value
    return use


class Rolling:
    """The last ``keep`` points of every route, fed one reading at a time."""

    def __init__(self, keep: int = 150) -> None:
        self.keep = keep
        self._last: tuple[float, dict[str, Totals]] | None = None
        self.points: dict[str, deque[Point]] = {}
        self.guards: deque[tuple[float, dict[Activation, float]]] = deque(maxlen=keep)

    def add(self, at: float, reading: dict[str, Totals]) -> None:
        """A new reading: one point per route seen in it (a route new since: from zero)."""
        if self._last is not None:
            then, previous = self._last
            for route, now in reading.items():
                series = self.points.setdefault(route, deque(maxlen=self.keep))
                series.append(point(at, at - then, previous.get(route, Totals()), now))
        self._last = (at, reading)

    def rebase(self) -> None:
        """Readings start again after a gap: the next is a baseline, not a point."""
        self._last = None
        self.guards.clear()

    def add_activations(self, at: float, found: dict[Activation, float]) -> None:
        self.guards.append((at, found))

    def activations_since(self, found: dict[Activation, float]) -> dict[Activation, float]:
        """How many of ``found`` (now) came since the oldest reading kept."""
        oldest = self.guards[0][1] if self.guards else {}
        return {k: v - oldest.get(k, 0.0) for k, v in found.items()}

    def guard_series(self, routes: set[str]) -> dict[str, Any]:
        """Activations per reading interval of ``routes``' guards, by guard and entity type.

        ``{"at": [interval ends], "lines": {"pii CREDIT_CARD": [count per interval]}}``.
        """
        kept = list(self.guards)
        names = sorted({(k[1], k[4]) for _, found in kept for k in found if k[0] in routes})
        lines: dict[str, list[float]] = {f"{guard} {entity}": [] for guard, entity in names}
        at: list[float] = []
        for (_, before), (when, after) in pairwise(kept):
            at.append(when)
            step = dict.fromkeys(names, 0.0)
            for key, value in after.items():
                if key[0] in routes:
                    step[(key[1], key[4])] += max(value - before.get(key, 0.0), 0.0)
            for (guard, entity), count in step.items():
                lines[f"{guard} {entity}"].append(count)
        return {"at": at, "lines": lines}

    def latest(self, route: str) -> Point | None:
        series = self.points.get(route)
        return series[-1] if series else None

    def of(self, route: str) -> list[Point]:
        return list(self.points.get(route, ()))
