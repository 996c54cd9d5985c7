"""Prefill and decode on separate pods: the roles, their hand-over, and who sees which."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from samples import EDGE_SAMPLES, load_yaml

SAMPLE = next(p for p in EDGE_SAMPLES if p.stem == "llama-70b-pd-nvidia")
UID = "00000000-0000-4000-8000-000000000001"
ROLE = "llm-d.ai/role"


def _objects(workload: str = "deployments", **settings: Any) -> dict[str, dict[str, Any]]:
    chosen = Settings.model_validate({"inferencePool": {"enabled": True},
                                      "disaggregation": {"workload": workload}, **settings})
    return {f"{o['kind']}/{o['metadata']['name']}": o
            for o in render(parse_llmmodel(load_yaml(SAMPLE)), chosen, owner_uid=UID)}


def _pod(objects: dict[str, dict[str, Any]], role: str) -> dict[str, Any]:
    return dict(objects[f"Deployment/llama-70b-pd-{role}"]["spec"]["template"]["spec"])


def _engine(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["containers"][0])


# (role, replicas, cards, cpu, engine port)
ROLES = [("prefill", 1, "2", "24", 8000), ("decode", 3, "2", "16", 8200)]


@pytest.mark.parametrize(("role", "replicas", "cards", "cpu", "port"), ROLES)
def test_each_role_has_its_replicas_resources_and_the_nixl_connector(
        role: str, replicas: int, cards: str, cpu: str, port: int) -> None:
    objects = _objects()
    deployment = objects[f"Deployment/llama-70b-pd-{role}"]
    assert deployment["spec"]["replicas"] == replicas
    assert deployment["spec"]["selector"]["matchLabels"][ROLE] == role
    assert deployment["spec"]["template"]["metadata"]["labels"][ROLE] == role
    engine = _engine(_pod(objects, role))
    limits = engine["resources"]["limits"]
    assert (limits["nvidia.com/gpu"], limits["cpu"]) == (cards, cpu)
    args = engine["args"]
    assert args[args.index("--port") + 1] == str(port)
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert config == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    assert {"name": "vllm", "containerPort": port, "protocol": "TCP"} in engine["ports"]
    assert engine["readinessProbe"]["httpGet"]["port"] == "vllm"
    side_channel = {e["name"]: e for e in engine["env"]}["VLLM_NIXL_SIDE_CHANNEL_HOST"]
    assert side_channel["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_decode_pods_route_through_the_sidecar_and_the_service_reaches_them_only() -> None:
    objects = _objects()
    sidecar = _pod(objects, "decode")["initContainers"][-1]
    assert sidecar["name"] == "routing-sidecar" and sidecar["restartPolicy"] == "Always"
    assert sidecar["args"][:2] == ["--port=8000", "--vllm-port=8200"]
    assert sidecar["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert all(c["name"] != "routing-sidecar" for c in _pod(objects, "prefill")["initContainers"])
    assert objects["Service/llama-70b-pd"]["spec"]["selector"][ROLE] == "decode"
    pool = objects["InferencePool/llama-70b-pd"]["spec"]
    assert ROLE not in pool["selector"]["matchLabels"]  # the picker sees both roles
    assert pool["targetPorts"] == [{"number": 8000}]


def test_the_picker_is_llm_ds_scheduler_with_a_profile_per_role() -> None:
    objects = _objects()
    picker = objects["Deployment/llama-70b-pd-epp"]["spec"]["template"]["spec"]
    assert picker["containers"][0]["image"] == \
        "ghcr.io/llm-d/llm-d-inference-scheduler:v0.8.0"
    config = yaml.safe_load(objects["ConfigMap/llama-70b-pd-epp"]["data"][
        "default-plugins.yaml"])
    assert config["featureGates"] == ["prepareDataPlugins"]  # the decider needs it
    types = [p["type"] for p in config["plugins"]]
    assert {"prefill-filter", "decode-filter", "disagg-profile-handler",
            "prefix-based-pd-decider", "disagg-headers-handler"} <= set(types)
    profiles = {p["name"]: [r["pluginRef"] for r in p["plugins"]]
                for p in config["schedulingProfiles"]}
    assert profiles["prefill"][0] == "prefill-filter"
    assert profiles["decode"][0] == "decode-filter"
    assert "queue-scorer" in profiles["decode"]


def test_both_roles_are_scraped_on_their_engine_port_and_nothing_autoscales() -> None:
    objects = _objects()
    monitor = objects["PodMonitor/llama-70b-pd"]["spec"]
    assert monitor["podMetricsEndpoints"][0]["port"] == "vllm"
    assert not any(k.startswith(("ScaledObject", "HTTPScaledObject")) for k in objects)
    assert "Deployment/llama-70b-pd" not in objects


def test_as_a_disaggregatedset_each_role_is_a_leaderworkerset_of_one_pod() -> None:
    objects = _objects("disaggregatedset")
    assert not any(k.startswith("Deployment/llama-70b-pd-") and not k.endswith("-epp")
                   for k in objects)
    roles = {r["name"]: r for r in
             objects["DisaggregatedSet/llama-70b-pd"]["spec"]["roles"]}
    assert list(roles) == ["prefill", "decode"]
    # what the DisaggregatedSet's LeaderWorkerSets are labelled: nothing the operator prunes
    assert roles["decode"]["metadata"] == {"labels": {ROLE: "decode"}}
    assert roles["decode"]["spec"]["replicas"] == 3
    template = roles["decode"]["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 1
    assert template["workerTemplate"]["metadata"]["labels"][ROLE] == "decode"
    assert template["workerTemplate"]["spec"]["initContainers"][-1]["name"] == \
        "routing-sidecar"


def test_auto_renders_deployments_where_no_cluster_is_seen() -> None:
    """`llmop render` cannot ask a cluster: auto means Deployments (the operator decides)."""
    kinds = {k.split("/")[0] for k in _objects("auto")}
    assert "DisaggregatedSet" not in kinds
