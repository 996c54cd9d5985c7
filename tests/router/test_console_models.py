"""The router's models as the console shows them: status read as written, keys that see."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.access.keyring import digest, parse_keyring
from llm_operator.api.validation import parse_llmmodel
from llm_operator.console.views import Condition
from llm_operator.router.console_models import ClusterModels, key_viewer, state_of

from samples import sample_doc

MODEL = parse_llmmodel(sample_doc("gemma4-31b-nvidia"))


@pytest.mark.parametrize(("status", "phase", "detail", "ready", "desired"), [
    ({}, "Pending", "", 0, 0),  # the operator has not written it yet
    ({"phase": "Ready", "currentReplicas": 2, "desiredReplicas": 3, "conditions": [
        {"type": "Ready", "status": "True", "reason": "Serving", "message": "2 replica(s)"}]},
     "Ready", "2 replica(s)", 2, 3),
    ({"phase": "Failed", "conditions": [{"type": "Placed", "status": "False",
                                         "reason": "DoesNotFit", "message": "needs 80 GiB"},
                                        "not a condition"]},
     "Failed", "", 0, 0),
])
def test_a_models_status_reads_as_its_state(status: dict[str, Any], phase: str, detail: str,
                                            ready: int, desired: int) -> None:
    state = state_of(MODEL, status, "r")
    assert (state.phase, state.detail, state.ready, state.desired) == (phase, detail, ready,
                                                                       desired)
    assert all(isinstance(c, Condition) for c in state.conditions)


def test_a_model_the_api_types_refuse_is_left_out_and_parsed_once_per_version() -> None:
    good = {**sample_doc("gemma4-31b-nvidia"), "status": {"phase": "Ready"}}
    good["metadata"] = {**good["metadata"], "resourceVersion": "7"}
    bad = {**sample_doc("gemma4-31b-nvidia")}
    bad["metadata"] = {**bad["metadata"], "name": "bad", "resourceVersion": "1"}
    bad["spec"] = {**bad["spec"], "contextWindowK": 0}
    models = ClusterModels(lambda: [good, bad], lambda: {("ai-models", MODEL.name): ["x"]})
    (only,) = models.states()
    assert (only.model.name, only.route, only.phase) == (MODEL.name, "x", "Ready")
    assert models.states()[0].model is only.model  # the same version: not parsed again


def test_a_key_sees_the_models_it_may_use_and_no_keys_means_everyone() -> None:
    ring = parse_keyring({"keys": [{"id": "a", "sha256": digest("sk-a"),
                                    "models": [f"{MODEL.namespace}/{MODEL.name}"]},
                                   {"id": "b", "sha256": digest("sk-b"), "models": ["x-*"]},
                                   {"id": "c", "sha256": digest("sk-c"), "disabled": True}]})
    viewer = key_viewer(lambda: ring)
    reached = state_of(MODEL, {}, "r", [f"{MODEL.namespace}/{MODEL.name}"])
    a, b = viewer("sk-a"), viewer("sk-b")
    assert a is not None and a.owner == "a" and a.sees(reached)
    assert b is not None and not b.sees(reached)
    assert viewer("sk-c") is None and viewer("sk-unknown") is None and viewer(None) is None
    open_door = key_viewer(lambda: None)(None)
    assert open_door is not None and open_door.owner == "" and open_door.sees(reached)
    # the name the key may use belongs to another model: this one is not shown to it
    assert not a.sees(state_of(MODEL, {}, "r", []))
