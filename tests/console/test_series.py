"""The console's live figures: quantiles from bucket counts, points from the gateway's registry."""

from __future__ import annotations

import math

import pytest

from llm_operator.console.series import Rolling, Totals, point, quantile, totals
from llm_operator.gateway.telemetry.metrics import GatewayMetrics, RouteMetrics

INF = math.inf


@pytest.mark.parametrize(("q", "before", "after", "expected"), [
    # 10 requests, all in (0.1, 0.25]: the median halfway into that bucket
    (0.5, {}, {0.1: 0, 0.25: 10, INF: 10}, 0.175),
    # only what came since the last reading counts
    (0.5, {0.1: 10, 0.25: 10, INF: 10}, {0.1: 10, 0.25: 20, INF: 20}, 0.175),
    # the first bucket starts at 0
    (0.5, {}, {0.1: 4, 0.25: 4, INF: 4}, 0.05),
    # in +Inf: the last finite bound
    (0.99, {}, {0.1: 0, 0.25: 0, INF: 3}, 0.25),
    (0.99, {}, {0.1: 50, 0.25: 100, INF: 100}, 0.247),
    # nothing seen: no figure, not 0
    (0.5, {0.1: 3, INF: 3}, {0.1: 3, INF: 3}, None),
    (0.5, {}, {}, None),
])
def test_a_quantile_is_read_from_the_buckets_between_two_readings(
        q: float, before: dict[float, float], after: dict[float, float],
        expected: float | None) -> None:
    found = quantile(q, before, after)
    assert found == pytest.approx(expected) if expected is not None else found is None


def test_the_gateways_registry_reads_as_each_routes_totals() -> None:
    metrics = GatewayMetrics()
    route = RouteMetrics(metrics, "gemma")
    for status, seconds in ((200, 0.2), (200, 0.2), (503, 0.01)):
        route.request(status, seconds)
    route.ttft.observe(0.05)
    route.completion_tokens.inc(40)
    route.prompt_tokens.inc(1000)  # not an output token
    route.cached_prompt_tokens.inc(900)
    metrics.queue_depth.labels("gemma", "default").set(3)
    found = totals(metrics.registry.collect())["gemma"]
    assert (found.requests, found.errors, found.completion_tokens) == (3, 1, 40)
    assert (found.prompt_tokens, found.cached_tokens) == (1000, 900)
    assert found.latency[0.25] == 3 and found.latency[INF] == 3
    assert found.ttft[0.05] == 1
    assert found.queue == {"default": 3}


def test_a_point_is_the_difference_of_two_readings_over_their_interval() -> None:
    before = Totals(requests=10, errors=1, latency={0.1: 10, INF: 10}, completion_tokens=100)
    after = Totals(requests=30, errors=1, latency={0.1: 30, INF: 30}, completion_tokens=500,
                   queue={"default": 2})
    found = point(1002.0, 2.0, before, after)
    assert (found.requests_per_s, found.errors_per_s, found.tokens_per_s) == (10, 0, 200)
    assert found.p50_ms == 50.0 and found.ttft_p50_ms is None
    assert found.as_dict()["queue"] == {"default": 2} and found.as_dict()["queued"] == 2


def test_rolling_keeps_the_last_points_of_every_route_and_starts_a_new_one_from_zero() -> None:
    rolling = Rolling(keep=3)
    rolling.add(0.0, {"a": Totals(requests=0)})
    for second in range(1, 6):
        rolling.add(float(second), {"a": Totals(requests=second * 2),
                                    **({"b": Totals(requests=7)} if second == 5 else {})})
    assert [p.at for p in rolling.of("a")] == [3.0, 4.0, 5.0]
    assert {p.requests_per_s for p in rolling.of("a")} == {2.0}
    latest = rolling.latest("b")
    assert latest is not None and latest.requests_per_s == 7.0  # seen first: from zero
    assert rolling.latest("c") is None


@pytest.mark.parametrize(("prompt", "cached", "expected"), [
    ((1000, 3000), (500, 2300), 90.0),  # 1800 of the interval's 2000 prompt tokens
    ((1000, 1000), (500, 500), None),  # no prompt in the interval: no figure, not 0
    ((1000, 2000), (500, 500), 0.0),  # an engine that says nothing was cached
    ((0, 10), (0, 12), 100.0),  # never above all of it
])
def test_the_prefix_cache_share_is_of_the_intervals_prompt_tokens(
        prompt: tuple[float, float], cached: tuple[float, float], expected: float | None
        ) -> None:
    found = point(2.0, 2.0, Totals(prompt_tokens=prompt[0], cached_tokens=cached[0]),
                  Totals(prompt_tokens=prompt[1], cached_tokens=cached[1], busy=3, slots=8))
    assert found.cache_hit_pct == expected
    assert (found.as_dict()["busy"], found.as_dict()["slots"]) == (3, 8)  # as read now


def test_guard_activations_chart_per_interval_by_guard_and_entity_of_visible_routes() -> None:
    rolling = Rolling(keep=10)
    pii = ("gemma", "pii", "output", "mask", "CREDIT_CARD")
    ssn = ("gemma", "pii", "input", "block", "US_SSN")
    hidden = ("other", "pii", "output", "mask", "CREDIT_CARD")  # not the visitor's model
    rolling.add_activations(0.0, {pii: 1, hidden: 5})
    rolling.add_activations(2.0, {pii: 4, hidden: 9})
    rolling.add_activations(4.0, {pii: 4, ssn: 2, hidden: 9})
    assert rolling.guard_series({"gemma"}) == {
        "at": [2.0, 4.0], "lines": {"pii CREDIT_CARD": [3.0, 0.0], "pii US_SSN": [0.0, 2.0]}}
    assert rolling.guard_series(set()) == {"at": [2.0, 4.0], "lines": {}}
