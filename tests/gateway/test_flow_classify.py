"""A request's band and fairness ID: from its key, then its headers, which only narrow."""

from __future__ import annotations

import pytest

from llm_operator.access.keyring import ClientKey
from llm_operator.gateway.flow.bands import (
    FAIRNESS_HEADER,
    OBJECTIVE_HEADER,
    BadFairnessId,
    band_for_priority,
    classify,
)
from llm_operator.gateway.settings.config import ConfigError, parse_config
from llm_operator.gateway.settings.flow_control import FlowControl

FLOW = FlowControl(objectives={"chat": "interactive", "nightly-report": "batch"})
DIGEST = "0" * 64
TEAM = ClientKey(id="team-a", sha256=DIGEST)
BATCH_KEY = ClientKey(id="etl", sha256=DIGEST, band="batch")
UNKNOWN_BAND_KEY = ClientKey(id="old", sha256=DIGEST, band="gold")
CRD_OBJECTIVES = {"premium": 150, "low": -5, "lowest": -1000}


@pytest.mark.parametrize(("headers", "key", "band", "group", "member", "ignored"), [
    ({}, None, "standard", "", "", None),
    ({OBJECTIVE_HEADER: "interactive"}, None, "interactive", "", "", None),
    ({OBJECTIVE_HEADER: "chat"}, None, "interactive", "", "", None),
    ({OBJECTIVE_HEADER: "premium"}, None, "interactive", "", "", None),
    ({OBJECTIVE_HEADER: "low"}, None, "batch", "", "", None),
    ({OBJECTIVE_HEADER: "lowest"}, None, "batch", "", "", None),
    ({OBJECTIVE_HEADER: "no-such-objective"}, None, "standard", "", "", "unknown"),
    ({FAIRNESS_HEADER: "tenant-7"}, None, "standard", "tenant-7", "", None),
    ({}, TEAM, "standard", "team-a", "", None),
    ({OBJECTIVE_HEADER: "batch"}, TEAM, "batch", "team-a", "", None),
    ({OBJECTIVE_HEADER: "interactive"}, TEAM, "standard", "team-a", "", "above_key"),
    ({OBJECTIVE_HEADER: "chat"}, BATCH_KEY, "batch", "etl", "", "above_key"),
    ({FAIRNESS_HEADER: "team-b"}, TEAM, "standard", "team-a", "team-b", None),
    ({}, UNKNOWN_BAND_KEY, "standard", "old", "", "unknown_key_band"),
], ids=["nothing", "band-header", "settings-objective", "crd-objective-above-top",
        "crd-objective-between", "crd-objective-below-bottom", "unknown-objective",
        "fairness-header", "key", "key-lowered-by-header", "key-not-raised-by-header",
        "key-band-not-raised", "key-narrowed-by-fairness-header", "key-band-unknown"])
def test_the_key_decides_and_headers_only_narrow(
        headers: dict[str, str], key: ClientKey | None, band: str, group: str, member: str,
        ignored: str | None) -> None:
    got = classify(FLOW, headers, key, CRD_OBJECTIVES)
    assert (got.band.name, got.group, got.member, got.ignored) == \
        (band, group, member, ignored)


@pytest.mark.parametrize(("value", "message"), [
    ("x" * 257, "257 bytes; at most 256"),
    ("é" * 129, "258 bytes; at most 256"),
    ("tenant\x01", "control characters"),
    ("tenant\x7f", "control characters"),
], ids=["too-long", "too-long-in-utf8", "control-character", "delete"])
def test_an_unusable_fairness_id_is_refused(value: str, message: str) -> None:
    with pytest.raises(BadFairnessId, match=message):
        classify(FLOW, {FAIRNESS_HEADER: value}, None)


def test_a_fairness_id_of_256_bytes_is_taken() -> None:
    assert classify(FLOW, {FAIRNESS_HEADER: "x" * 256}, None).group == "x" * 256


@pytest.mark.parametrize(("priority", "band"), [
    (1000, "interactive"), (100, "interactive"), (99, "standard"), (0, "standard"),
    (-1, "batch"), (-100, "batch"), (-101, "batch")])
def test_an_objective_priority_selects_the_highest_band_not_above_it(
        priority: int, band: str) -> None:
    assert band_for_priority(FLOW, priority).name == band


@pytest.mark.parametrize(("flow", "message"), [
    ({"bands": [{"name": "batch", "priority": 0, "maxWaitSeconds": 0}],
      "defaultBand": "batch"},
     "flowControl.bands.0: band 'batch': maxWaitSeconds 0 lets no request wait"),
    ({"bands": [{"name": "batch", "priority": 0, "maxQueue": 0}], "defaultBand": "batch"},
     "flowControl.bands.0: band 'batch': maxQueue 0 queues nothing"),
    ({"bands": [{"name": "batch", "priority": 0, "maxQueue": -1}], "defaultBand": "batch"},
     "flowControl.bands.0.maxQueue: Input should be greater than or equal to 0"),
    ({"bands": [{"name": "batch", "priority": 0, "maxWaitSeconds": -2}],
      "defaultBand": "batch"},
     "flowControl.bands.0.maxWaitSeconds: Input should be greater than or equal to 0"),
    ({"defaultBand": "gold"}, "flowControl: defaultBand: 'gold' is not a band"),
    ({"objectives": {"chat": "gold"}}, "flowControl: objectives.chat: 'gold' is not a band"),
    ({"bands": [{"name": "a", "priority": 1}, {"name": "a", "priority": 2}],
      "defaultBand": "a"}, "bands[1]: name 'a' is used twice"),
    ({"bands": [{"name": "a", "priority": 1}, {"name": "b", "priority": 1}],
      "defaultBand": "a"}, "bands: two share a priority"),
    ({"perReplicaConcurrency": 0},
     "flowControl.perReplicaConcurrency: Input should be greater than or equal to 1"),
    ({"bands": [{"name": "batch", "priority": 0, "maxShare": 0}], "defaultBand": "batch"},
     "flowControl.bands.0.maxShare: Input should be greater than 0"),
    ({"bands": [{"name": "batch", "priority": 0, "maxShare": 1.5}], "defaultBand": "batch"},
     "flowControl.bands.0.maxShare: Input should be less than or equal to 1"),
    ({"bands": [{"name": "batch", "priority": 0, "reserveSeconds": -1}],
      "defaultBand": "batch"},
     "flowControl.bands.0.reserveSeconds: Input should be greater than or equal to 0"),
    ({"bands": [{"name": "batch", "priority": 0, "idleSeconds": -1}],
      "defaultBand": "batch"},
     "flowControl.bands.0.idleSeconds: Input should be greater than or equal to 0"),
    ({"engineQueue": -1},
     "flowControl.engineQueue: Input should be greater than or equal to 0"),
    ({"saturation": {"maxEngineQueue": -0.5}},
     "flowControl.saturation.maxEngineQueue: Input should be greater than or equal to 0"),
    ({"saturation": {"maxEngineQueue": 2}},
     "flowControl.saturation.maxEngineQueue: Input should be less than or equal to 1"),
    ({"saturation": {"kvCacheThreshold": 1.5}},
     "flowControl.saturation.kvCacheThreshold: Input should be less than or equal to 1"),
    ({"saturation": {"kvCacheThreshold": 0}},
     "flowControl.saturation.kvCacheThreshold: Input should be greater than 0"),
    ({"saturation": {"lookSeconds": 0}},
     "flowControl.saturation.lookSeconds: Input should be greater than or equal to 0.01"),
    ({"bands": [{"name": "best-effort", "priority": 0, "sheddable": True}],
      "defaultBand": "best-effort"},
     "flowControl: bands: every band is sheddable and engineQueue is 0: no request ever "
     "waits here"),
], ids=["no-wait", "no-queue", "negative-length", "negative-wait", "unknown-default",
        "objective-to-unknown-band", "duplicate-band", "duplicate-priority",
        "zero-concurrency", "no-share", "share-over-all", "negative-reserve", "negative-idle",
        "negative-engine-queue", "negative-engine-queue-fraction",
        "engine-queue-fraction-above-one", "kv-threshold-above-one", "kv-threshold-zero",
        "no-look-interval", "sheddable-only-without-engine-queue"])
def test_queue_settings_that_cannot_work_are_refused_with_their_path(
        flow: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=r"gateway\.yaml: ") as refused:
        parse_config({"flowControl": flow}, "gateway.yaml", empty_ok=True)
    assert message in str(refused.value)


def test_a_sheddable_band_may_have_no_queue_and_no_wait() -> None:
    config = parse_config({"flowControl": {"bands": [
        {"name": "standard", "priority": 0},
        {"name": "best-effort", "priority": -1, "sheddable": True, "maxQueue": 0,
         "maxWaitSeconds": 0}]}}, empty_ok=True)
    assert config.flow_control.bands[1].sheddable
