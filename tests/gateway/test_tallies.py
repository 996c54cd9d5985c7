"""The gateway's lock-free counters and histograms read on /metrics as prometheus_client's own."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from llm_operator.gateway.telemetry.tallies import spreads, tallies

BUCKETS = (0.005, 0.01, 0.5, 1, 300)
# (label values, amount): what a run of requests updated
UPDATES = [(("chat", "200"), 1.0), (("chat", "200"), 2.0), (("chat", "429"), 1.0),
           (("embed", "200"), 0.0)]
OBSERVED = [(("chat",), 0.001), (("chat",), 0.005), (("chat",), 0.0051), (("chat",), 1.0),
            (("chat",), 299.9), (("chat",), 301.0), (("embed",), 0.02)]


def exposition(registry: CollectorRegistry) -> str:
    """/metrics as text, every ``_created`` timestamp blanked (they differ by microseconds)."""
    text = generate_latest(registry).decode()
    return re.sub(r"(_created\{[^}]*\}) \S+", r"\1 T", text)


def test_a_counter_reads_as_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    counted = tallies("llmop_test_requests", "Requests.", ["route", "status"], registry=ours)
    counter = Counter("llmop_test_requests", "Requests.", ["route", "status"],
                      registry=theirs)
    for labels, amount in UPDATES:
        counted.labels(*labels).inc(amount)
        counter.labels(*labels).inc(amount)
    assert exposition(ours) == exposition(theirs)
    assert ours.get_sample_value("llmop_test_requests_total",
                                 {"route": "chat", "status": "200"}) == 3.0


def test_a_histogram_reads_as_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    spread = spreads("llmop_test_seconds", "Time.", ["route"], buckets=BUCKETS,
                      registry=ours)
    histogram = Histogram("llmop_test_seconds", "Time.", ["route"], buckets=BUCKETS,
                          registry=theirs)
    for labels, seconds in OBSERVED:
        spread.labels(*labels).observe(seconds)
        histogram.labels(*labels).observe(seconds)
    assert exposition(ours) == exposition(theirs)
    # a value on a bound counts in that bound's bucket (le: less than or equal)
    assert ours.get_sample_value("llmop_test_seconds_bucket",
                                 {"route": "chat", "le": "0.005"}) == 2.0


@pytest.mark.parametrize(("call", "message"), [
    (lambda t, s: t.labels("chat"), r"llmop_t_requests takes the labels \['route', 'status'\]"),
    (lambda t, s: t.labels("chat", "200").inc(-1), "a counter only goes up"),
    (lambda t, s: s.labels(), r"llmop_t_seconds takes the labels \['route'\]"),
    (lambda t, s: spreads("llmop_t_x", "X.", [], buckets=(1, 0.5),
                          registry=CollectorRegistry()),
     "llmop_t_x: buckets must be finite and in increasing order"),
], ids=["too-few-labels", "a-negative-increment", "no-labels", "buckets-out-of-order"])
def test_a_wrong_use_says_what_is_wrong(call: object, message: str) -> None:
    registry = CollectorRegistry()
    counted = tallies("llmop_t_requests", "R.", ["route", "status"], registry=registry)
    spread = spreads("llmop_t_seconds", "S.", ["route"], buckets=BUCKETS, registry=registry)
    with pytest.raises(ValueError, match=message):
        call(counted, spread)  # type: ignore[operator]


def test_a_name_registered_twice_is_refused_as_prometheus_client_refuses_it() -> None:
    registry = CollectorRegistry()
    Counter("llmop_t_requests", "R.", ["route"], registry=registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        tallies("llmop_t_requests", "R.", ["route"], registry=registry)
