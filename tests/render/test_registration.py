"""`llmop up --register`'s objects, pure: the remote LLMModel, its key Secret, the Lease."""

from __future__ import annotations

import datetime

import pytest

from llm_operator.api import labels as L
from llm_operator.api.rules import broken_rules
from llm_operator.api.validation import parse_llmmodel
from llm_operator.render.registration import (
    lease_left,
    lease_object,
    machine_name,
    registered_model,
)

from samples import local_doc

NOW = datetime.datetime(2026, 11, 23, 12, 0, 0, tzinfo=datetime.UTC)


@pytest.mark.parametrize(("hostname", "name"), [
    ("laptop", "llmop-up-laptop"),
    ("Ana's MacBook Pro.local", "llmop-up-ana-s-macbook-pro-local"),
    ("x" * 80, "llmop-up-" + "x" * 54),
    ("___", "llmop-up-machine"),
])
def test_the_machine_name_is_a_dns_label(hostname: str, name: str) -> None:
    assert machine_name(hostname) == name


def test_a_served_model_becomes_a_remote_model_pointing_at_this_machine() -> None:
    local = parse_llmmodel(local_doc("gemma3-270m"))
    doc = registered_model(local, namespace="team-a", base_url="http://10.0.0.7:8000/v1",
                           lease="llmop-up-laptop")
    model = parse_llmmodel(doc)  # a valid LLMModel
    assert broken_rules(model) == []
    spec = model.spec
    assert (spec.deployment_mode, spec.model_id, spec.remote_api.base_url if spec.remote_api
            else None) == ("remote", "gemma-3-270m", "http://10.0.0.7:8000/v1")
    assert spec.remote_api is not None and spec.remote_api.api_key_secret == "llmop-up-laptop"
    assert spec.mcp_exposure.tool_name == "gemma3_270m_local"  # still an MCP tool
    assert doc["metadata"]["labels"][L.REGISTERED_BY] == "llmop-up-laptop"
    assert doc["metadata"]["namespace"] == "team-a"
    assert "modelSource" not in doc["spec"] and "engineArgs" not in doc["spec"]


@pytest.mark.parametrize(("renewed_seconds_ago", "duration", "left"), [
    (5, 30, 25.0), (29, 30, 1.0), (31, 30, None), (0, 30, 30.0),
])
def test_a_lease_lapses_its_duration_after_its_last_renewal(
        renewed_seconds_ago: int, duration: int, left: float | None) -> None:
    lease = lease_object("ns", "llmop-up-x", "llmop-up-x",
                         NOW - datetime.timedelta(seconds=renewed_seconds_ago))
    lease["spec"]["leaseDurationSeconds"] = duration
    assert lease_left(lease, NOW) == left


@pytest.mark.parametrize("lease", [None, {}, {"spec": {"renewTime": "garbage",
                                                      "leaseDurationSeconds": 30}},
                                   {"spec": {"holderIdentity": "x"}}])
def test_no_lease_or_an_unreadable_one_has_lapsed(lease: dict[str, object] | None) -> None:
    assert lease_left(lease, NOW) is None
