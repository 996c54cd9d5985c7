"""Counters and histograms every proxied request updates: lock-free, read as Prometheus's.

prometheus_client takes a lock and runs a Python loop over the buckets on every update: a
request's six updates cost it about 6 µs, a tenth of what the gateway's own parts spend
per request (docs/benchmarks.md). The gateway updates these only from its event loop,
so a tally is a plain number and a histogram a list of bucket counts. A family answers
``labels()`` as prometheus_client's metrics do, and its ``collect()`` yields the same
samples theirs would (``_total`` and ``_created`` of a counter; ``_bucket``, ``_count``,
``_sum`` and ``_created`` of a histogram), so /metrics reads the same.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

# how prometheus_client writes a bucket's bound as its "le" label (the library is untyped)
_go_float = cast(Callable[[float], str], floatToGoString)


class Tally:
    """One counter series."""

    __slots__ = ("created", "value")

    def __init__(self) -> None:
        self.value = 0.0
        self.created = time.time()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter only goes up: inc() takes an amount of 0 or more")
        self.value += amount

    def samples(self, metric: Metric, labels: dict[str, str]) -> None:
        metric.add_sample(f"{metric.name}_total", labels, self.value)
        metric.add_sample(f"{metric.name}_created", labels, self.created)


class Spread:
    """One histogram series: a count per bucket (the last one +Inf), and the sum."""

    __slots__ = ("_bounds", "_les", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...], les: list[str]) -> None:
        self._bounds, self._les = bounds, les
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, amount)] += 1  # the first bound >= it
        self.sum += amount

    def samples(self, metric: Metric, labels: dict[str, str]) -> None:
        running = 0
        for le, count in zip(self._les, list(self.counts), strict=True):
            running += count
            metric.add_sample(f"{metric.name}_bucket", {**labels, "le": le}, running)
        metric.add_sample(f"{metric.name}_count", labels, running)
        metric.add_sample(f"{metric.name}_sum", labels, self.sum)
        metric.add_sample(f"{metric.name}_created", labels, self.created)


S = TypeVar("S", Tally, Spread)


class Family(Collector, Generic[S]):
    """One metric's series by label values, registered in ``registry``.

    ``labels()`` as prometheus_client's metrics; ``new`` makes a label set's series.
    """

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *,
                 kind: str, new: Callable[[], S], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.kind = name, documentation, kind
        self.labelnames = tuple(labelnames)
        self._new: Callable[[], S] = new
        self._series: dict[tuple[str, ...], S] = {}
        registry.register(self)

    def labels(self, *values: object) -> S:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {list(self.labelnames)}, "
                             f"got {len(values)} values")
        key = tuple(str(v) for v in values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = self._new()
        return series

    def describe(self) -> list[Metric]:
        return [Metric(self.name, self.documentation, self.kind)]

    def collect(self) -> Iterator[Metric]:
        metric = Metric(self.name, self.documentation, self.kind)
        for values, series in list(self._series.items()):
            series.samples(metric, dict(zip(self.labelnames, values, strict=True)))
        yield metric


def tallies(name: str, documentation: str, labelnames: Sequence[str], *,
            registry: CollectorRegistry) -> Family[Tally]:
    """A labelled counter, as prometheus_client's ``Counter(name, ...)``."""
    return Family(name, documentation, labelnames, kind="counter", new=Tally,
                  registry=registry)


def spreads(name: str, documentation: str, labelnames: Sequence[str], *,
            buckets: Sequence[float], registry: CollectorRegistry) -> Family[Spread]:
    """A labelled histogram, as prometheus_client's ``Histogram(name, ..., buckets=)``."""
    bounds = tuple(float(b) for b in buckets)
    if not bounds or list(bounds) != sorted(bounds) or bounds[-1] == float("inf"):
        raise ValueError(f"{name}: buckets must be finite and in increasing order")
    les = [*(_go_float(b) for b in bounds), "+Inf"]
    return Family(name, documentation, labelnames, kind="histogram",
                  new=lambda: Spread(bounds, les), registry=registry)
