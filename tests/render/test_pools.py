"""Rendering an InferencePool: the pool, its HTTPRoute and the endpoint picker it names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from k8s_schemas import validate_object
from samples import sample_doc


@pytest.mark.parametrize(("sample", "pooled"), [
    ("gemma4-31b-nvidia", True), ("qwen36-35b-gaudi", True),  # vLLM
    ("qwen3-32b-sglang-nvidia", True),  # SGLang
    ("qwen35-9b-cpu", False), ("llama-cpu-s3", False), ("gpt55-remote", False),
])
def test_vllm_and_sglang_models_become_inference_pools_when_enabled(
        sample: str, pooled: bool) -> None:
    settings = Settings.model_validate({"inferencePool": {
        "enabled": True, "gateway": {"name": "llm-d-gateway", "namespace": "llm-d"},
        "endpointPicker": {"service": "{name}-epp", "port": 9002}}})
    model = parse_llmmodel(sample_doc(sample))
    objects = render(model, settings, owner_uid="uid-1")
    named = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    kinds = {o["kind"]: o for o in objects}
    assert ("InferencePool" in kinds and "HTTPRoute" in kinds) is pooled
    assert not {"InferencePool", "HTTPRoute"} & {o["kind"] for o in render(model)}  # off
    if not pooled:
        return
    pool, route = kinds["InferencePool"], kinds["HTTPRoute"]
    pod_labels = named[("Deployment", model.name)]["spec"]["template"]["metadata"]["labels"]
    assert pool["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pool["spec"]["endpointPickerRef"] == {
        "name": f"{model.name}-epp", "port": {"number": 9002}, "failureMode": "FailClose"}
    assert route["spec"]["parentRefs"] == [{"group": "gateway.networking.k8s.io",
                                            "kind": "Gateway", "name": "llm-d-gateway",
                                            "namespace": "llm-d"}]
    rule = route["spec"]["rules"][0]
    assert rule["matches"][0]["headers"][0]["value"] == model.spec.model_id
    assert rule["backendRefs"][0]["name"] == pool["metadata"]["name"]
    # the picker the pool names: its own identity and pods, which the pool does not select
    picker = {kind for kind, name in named if name == f"{model.name}-epp"}
    assert picker == {"ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Deployment",
                      "Service"}
    epp = named[("Deployment", f"{model.name}-epp")]["spec"]["template"]
    assert not pool["spec"]["selector"]["matchLabels"].items() <= \
        epp["metadata"]["labels"].items()
    args = epp["spec"]["containers"][0]["args"]
    assert args[:6] == ["--pool-name", model.name, "--pool-namespace", model.namespace,
                        "--pool-group", "inference.networking.k8s.io"]
    assert ("--total-queued-requests-metric=sglang:num_queue_reqs" in args) is (
        model.spec.inference_engine == "sglang")
    service = named[("Service", f"{model.name}-epp")]
    assert service["spec"]["ports"][0]["port"] == 9002
    for obj in objects:
        assert validate_object(obj) == []  # Kubernetes' and the upstream CRDs' schemas


@pytest.mark.parametrize(("scorers", "config", "error"), [
    (None, ["queue-scorer", 2, "kv-cache-utilization-scorer", 2, "prefix-cache-scorer", 3],
     None),
    ({"queue-scorer": 1, "prefix-cache-scorer": 0}, ["queue-scorer", 1], None),
    ({"queue-scorer": 0}, None, "at least one scorer"),
    ({"queue-scorer": -1}, None, "at least one scorer|0 or more"),
], ids=["default", "one-left-out", "none", "negative"])
def test_the_pickers_plugins_come_from_the_settings(
        scorers: dict[str, int] | None, config: list[Any] | None, error: str | None) -> None:
    picker = {} if scorers is None else {"scorers": scorers}
    raw = {"inferencePool": {"enabled": True, "endpointPicker": picker}}
    if error is not None:
        with pytest.raises(ValueError, match=error):
            Settings.model_validate(raw)
        return
    model = parse_llmmodel(sample_doc("gemma4-31b-nvidia"))
    objects = render(model, Settings.model_validate(raw))
    data = next(o for o in objects if o["kind"] == "ConfigMap"
                and o["metadata"]["name"].endswith("-epp"))["data"]["default-plugins.yaml"]
    parsed = yaml.safe_load(data)
    assert parsed["kind"] == "EndpointPickerConfig"
    profile = parsed["schedulingProfiles"][0]["plugins"]
    assert [x for p in profile for x in (p["pluginRef"], p["weight"])] == config
    assert [p["type"] for p in parsed["plugins"]] == config[::2]


def test_a_picker_run_elsewhere_is_not_rendered() -> None:
    settings = Settings.model_validate({"inferencePool": {
        "enabled": True, "endpointPicker": {"deploy": False}}})
    objects = render(parse_llmmodel(sample_doc("gemma4-31b-nvidia")), settings)
    assert "InferencePool" in {o["kind"] for o in objects}
    assert not any(o["metadata"]["name"].endswith("-epp") for o in objects)


def test_the_pickers_service_listens_on_the_port_its_pool_names() -> None:
    settings = Settings.model_validate({"inferencePool": {
        "enabled": True, "endpointPicker": {"port": 9100}}})
    objects = render(parse_llmmodel(sample_doc("gemma4-31b-nvidia")), settings)
    pool = next(o for o in objects if o["kind"] == "InferencePool")
    service = next(o for o in objects if o["kind"] == "Service"
                   and o["metadata"]["name"].endswith("-epp"))
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9100}
    assert service["spec"]["ports"][0]["port"] == 9100
