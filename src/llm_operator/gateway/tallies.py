"""Counters and histograms every proxied request updates: lock-free, read as Prometheus's.

prometheus_client takes a lock and runs a Python loop over the buckets on every update: a
request's six updates cost it about 6 µs, a tenth of what the gateway's own parts spend
per request (docs/benchmarks.md, #50). The gateway updates these only from its event loop,
so a tally is a plain number and a histogram a list of bucket counts. A family answers
``labels()`` as prometheus_client's metrics do, and its ``collect()`` yields the same
samples theirs would (``_total`` and ``_created`` of a counter; ``_bucket``, ``_count``,
``_sum`` and ``_created`` of a histogram), so /metrics reads the same.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Iterator, Sequence
from typing import cast

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


class Spread:
    """One histogram series: a count per bucket (the last one +Inf), and the sum."""

    __slots__ = ("_bounds", "counts", "created", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.created = time.time()

    def observe(self, amount: float) -> None:
        self.counts[bisect.bisect_left(self._bounds, amount)] += 1  # the first bound >= it
        self.sum += amount


class _Family(Collector):
    """Series by label values, registered as one metric of ``registry``."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 registry: CollectorRegistry) -> None:
        self.name, self.documentation = name, documentation
        self.labelnames = tuple(labelnames)
        registry.register(self)

    def describe(self) -> list[Metric]:
        return [self._metric()]

    def _metric(self) -> Metric:
        raise NotImplementedError

    def _labels(self, values: tuple[str, ...]) -> dict[str, str]:
        return dict(zip(self.labelnames, values, strict=True))

    def _check(self, values: tuple[object, ...]) -> tuple[str, ...]:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes the labels {list(self.labelnames)}, "
                             f"got {len(values)} values")
        return tuple(str(v) for v in values)


class Tallies(_Family):
    """A labelled counter (as prometheus_client's Counter named ``name``)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *,
                 registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, registry)
        self._series: dict[tuple[str, ...], Tally] = {}

    def labels(self, *values: object) -> Tally:
        key = self._check(values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Tally()
        return series

    def _metric(self) -> Metric:
        return Metric(self.name, self.documentation, "counter")

    def collect(self) -> Iterator[Metric]:
        metric = self._metric()
        for values, series in list(self._series.items()):
            labels = self._labels(values)
            metric.add_sample(f"{self.name}_total", labels, series.value)
            metric.add_sample(f"{self.name}_created", labels, series.created)
        yield metric


class Spreads(_Family):
    """A labelled histogram (as prometheus_client's Histogram with ``buckets``)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], *,
                 buckets: Sequence[float], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, registry)
        bounds = tuple(float(b) for b in buckets)
        if list(bounds) != sorted(bounds) or not bounds or bounds[-1] == float("inf"):
            raise ValueError(f"{name}: buckets must be finite and in increasing order")
        self._bounds = bounds
        self._les = [*(_go_float(b) for b in bounds), "+Inf"]
        self._series: dict[tuple[str, ...], Spread] = {}

    def labels(self, *values: object) -> Spread:
        key = self._check(values)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = Spread(self._bounds)
        return series

    def _metric(self) -> Metric:
        return Metric(self.name, self.documentation, "histogram")

    def collect(self) -> Iterator[Metric]:
        metric = self._metric()
        for values, series in list(self._series.items()):
            labels = self._labels(values)
            running = 0
            for le, count in zip(self._les, list(series.counts), strict=True):
                running += count
                metric.add_sample(f"{self.name}_bucket", {**labels, "le": le}, running)
            metric.add_sample(f"{self.name}_count", labels, running)
            metric.add_sample(f"{self.name}_sum", labels, series.sum)
            metric.add_sample(f"{self.name}_created", labels, series.created)
        yield metric
