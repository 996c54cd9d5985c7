"""Each replica's engine queue adapts to what its engine reports while requests wait here."""

from __future__ import annotations

import pytest

from llm_operator.gateway.flow.saturation import (
    CALM_LOOKS,
    EngineReport,
    Headroom,
    Saturation,
    adapt,
)
from llm_operator.gateway.settings.flow_control import FlowControl

SLOTS = 8


@pytest.mark.parametrize(("value", "report", "demand", "after"), [
    # a slot idles (7 of 8 run, none waits) while requests wait here: one more
    (0, EngineReport(waiting=0, running=7), True, 1),
    (3, EngineReport(waiting=0, running=5), True, 4),
    (4, EngineReport(waiting=0, running=0), True, 4),  # the most (0.5 of 8 slots)
    # the same idle slot with nobody waiting here says nothing of the round trip
    (2, EngineReport(waiting=0, running=7), False, 2),
    # full, a request to spare: unchanged (narrowed only after CALM_LOOKS looks in a row)
    (2, EngineReport(waiting=2, running=8), True, 2),
    # a KV cache past the threshold: nothing beyond what it runs
    (3, EngineReport(waiting=1, running=8, kv_usage=0.9), True, 0),
    (3, EngineReport(waiting=4, running=5, kv_usage=0.95), True, -3),
    (0, EngineReport(waiting=4, running=0, kv_usage=1.0), True, 1 - SLOTS),  # one slot
    # its KV cache has room again: back towards its slots, one a look
    (-3, EngineReport(waiting=0, running=5, kv_usage=0.5), True, -2),
    # unreadable: the configured engineQueue (1 here), whatever it was
    (4, None, True, 1),
    (-2, None, False, 1),
], ids=["idle-slot-widens", "widens-again", "stops-at-the-most", "no-demand-no-change",
        "full-with-spare-holds", "kv-full", "kv-full-runs-fewer", "kv-full-at-least-one",
        "kv-recovers", "unreadable-falls-back", "unreadable-from-negative"])
def test_one_look_at_an_engine(value: int, report: EngineReport | None, demand: bool,
                               after: int) -> None:
    headroom = Headroom(value)
    assert adapt(headroom, report, slots=SLOTS, start=1, most=4, kv_threshold=0.8,
                 demand=demand) == after
    assert headroom.value == after
    assert headroom.unreadable == (report is None)


def test_a_full_engine_with_requests_to_spare_is_narrowed_after_calm_looks() -> None:
    headroom = Headroom(3)
    full = EngineReport(waiting=3, running=SLOTS)
    values = [adapt(headroom, full, slots=SLOTS, start=0, most=4, kv_threshold=0.8,
                    demand=True) for _ in range(2 * CALM_LOOKS)]
    assert values[CALM_LOOKS - 2] == 3
    assert values[CALM_LOOKS - 1] == 2  # the least that keeps the slots full is sought
    assert values[-1] == 1
    idle = EngineReport(waiting=0, running=SLOTS - 1)
    adapt(headroom, idle, slots=SLOTS, start=0, most=4, kv_threshold=0.8, demand=True)
    assert (headroom.value, headroom.calm) == (2, 0)  # an idle slot starts the count again


def look(saturation: Saturation, url: str, report: EngineReport | None,
         slots: int = SLOTS) -> tuple[bool, bool]:
    return saturation.looked(url, report, slots=slots, demand=True)


IDLE = EngineReport(waiting=0, running=SLOTS - 1)


@pytest.mark.parametrize(("settings", "looks", "most"), [
    ({}, 10, 4),  # default: half the slots
    ({"saturation": {"maxEngineQueue": 0.25}}, 10, 2),
    ({"saturation": {"maxEngineQueue": 0.01}}, 10, 1),  # at least one
    ({"saturation": {"maxEngineQueue": 0}}, 10, 0),
    ({"engineQueue": 6, "saturation": {"maxEngineQueue": 0.25}}, 10, 6),  # never below
    ({"saturation": {"adaptive": False}, "engineQueue": 2}, 10, 2),
    ({"enabled": False}, 10, 0),
], ids=["half-the-slots", "a-quarter", "at-least-one", "none", "static-floor",
        "not-adaptive", "flow-control-off"])
def test_an_engine_queue_widens_up_to_its_settings(settings: dict[str, object], looks: int,
                                                   most: int) -> None:
    saturation = Saturation(FlowControl.model_validate(settings))
    for _ in range(looks):
        look(saturation, "http://a/v1", IDLE)
    assert saturation.headroom("http://a/v1") == most


def test_unreadable_metrics_are_reported_once_until_read_again() -> None:
    saturation = Saturation(FlowControl(engine_queue=1))
    assert look(saturation, "http://a/v1", IDLE) == (True, False)  # 1 -> 2
    assert look(saturation, "http://a/v1", None) == (True, True)  # back to 1: say so
    assert look(saturation, "http://a/v1", None) == (False, False)  # said already
    assert look(saturation, "http://a/v1", IDLE) == (True, False)
    assert look(saturation, "http://a/v1", None) == (True, True)  # lost again: say again


def test_replicas_keep_their_engine_queue_across_reconfigures_unless_the_settings_change(
        ) -> None:
    settings = FlowControl()
    saturation = Saturation(settings)
    for url in ("http://a/v1", "http://b/v1"):
        look(saturation, url, IDLE)
    saturation.configure(settings, ["http://a/v1"])  # b's replica went away
    assert (saturation.headroom("http://a/v1"), saturation.headroom("http://b/v1")) == (1, 0)
    saturation.configure(FlowControl(engine_queue=2), ["http://a/v1"])
    assert saturation.headroom("http://a/v1") == 2  # new settings: start again
