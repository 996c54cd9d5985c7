"""What the built-in autoscaler reads (router endpoints, their counts) and reports (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.reconcile.autoscaling import (
    Decision,
    Report,
    combine,
    report_after,
    router_endpoints,
)


def piece(port: int | None, *endpoints: tuple[list[str], bool | None]) -> dict[str, Any]:
    return {"ports": [] if port is None else [{"name": "http", "port": port}],
            "endpoints": [{"addresses": a, **({} if r is None else {"conditions": {"ready": r}})}
                          for a, r in endpoints]}


@pytest.mark.parametrize(("slices", "urls"), [
    ([piece(8080, (["10.0.0.5"], True), (["10.0.0.6"], None))],
     ["http://10.0.0.5:8080", "http://10.0.0.6:8080"]),  # no conditions: ready
    ([piece(8080, (["10.0.0.5"], False))], []),  # a router not ready yet
    ([piece(None, (["10.0.0.5"], True))], []),  # no port of that name
    ([piece(8080, (["fd00::5"], True))], ["http://[fd00::5]:8080"]),
    ([piece(8080, (["10.0.0.5"], True)), piece(8080, (["10.0.0.5"], True))],
     ["http://10.0.0.5:8080"]),  # the same endpoint in two slices
    ([], []),
], ids=["ready", "not-ready", "no-port", "ipv6", "duplicate", "no-slices"])
def test_the_router_replicas_to_read(slices: list[dict[str, Any]], urls: list[str]) -> None:
    assert router_endpoints(slices, "http") == urls


def test_router_replicas_add_their_requests_but_not_the_engines_queue() -> None:
    answers = [
        {"models": {"ns/a": {"pending": 3, "waiting": 2}, "ns/b": {"pending": 1}}},
        {"models": {"ns/a": {"pending": 4, "waiting": 5}}},  # the same engines, scraped later
        {"models": {}},
    ]
    assert combine(answers) == {"ns/a": (7, 5.0), "ns/b": (1, 0.0)}


LOAD = Report(True, "Load", "1 -> 2 replica(s): 8 request(s) for 1 replica(s)")


@pytest.mark.parametrize(("previous", "decision", "report"), [
    (None, Decision(2, "Load", "8 request(s) for 1 replica(s)"), LOAD),
    (LOAD, Decision(2, "Steady", "6 request(s) for 2 replica(s)"), LOAD),  # no write
    (None, Decision(1, "Steady", "0 request(s) for 1 replica(s)"),
     Report(True, "Steady", "1 replica(s) for the load; the router's counts are read")),
    (LOAD, Decision(1, "NoSignal", "no load signal"),
     Report(False, "NoSignal", "holding 1 replica(s): router http://10.0.0.5:8080: timeout")),
    (Report(False, "NoSignal", "holding"), Decision(1, "Steady", "0 request(s)"),
     Report(True, "Steady", "1 replica(s) for the load; the router's counts are read")),
], ids=["a-change", "steady-keeps-the-last-change", "first-look", "no-signal",
        "signal-back"])
def test_the_scaling_condition_changes_only_with_the_replicas_or_the_signal(
        previous: Report | None, decision: Decision, report: Report) -> None:
    current = 2 if decision.reason == "Steady" and previous is LOAD else 1
    assert report_after(previous, decision, current,
                        "router http://10.0.0.5:8080: timeout") == report
