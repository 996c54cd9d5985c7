"""Rendering: golden manifests, official-schema validity, and the invariants users rely on."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from llm_operator.api.validation import parse_llmmodel
from llm_operator.cli.main import cli
from llm_operator.gateway.upstream.proxies import proxy_settings
from llm_operator.profiles.settings import Settings
from llm_operator.render import RenderError, render
from llm_operator.render.accelerators import cpu_quantity

from k8s_schemas import validate_object
from samples import CLUSTER_EXAMPLES, EDGE_SAMPLES, GUIDE_SAMPLES, load_yaml, sample_doc

GOLDEN = Path(__file__).parent / "golden"
ALL_SAMPLES = GUIDE_SAMPLES + EDGE_SAMPLES + CLUSTER_EXAMPLES
UID = "00000000-0000-4000-8000-000000000001"


def _render(path: Path, settings: Settings | None = None) -> list[dict[str, Any]]:
    return render(parse_llmmodel(load_yaml(path)), settings or Settings(), owner_uid=UID)


def _by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["kind"]: o for o in objects}


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.stem)
def test_golden_manifests(path: Path, update_golden: bool) -> None:
    text = "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in _render(path))
    golden = GOLDEN / f"{path.stem}.yaml"
    if update_golden:
        golden.write_text(text)
    assert golden.exists(), f"missing {golden}: run `make golden`"
    assert text == golden.read_text(), f"{path.stem} changed: review, then `make golden`"


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.stem)
def test_every_object_validates_against_official_schemas(path: Path) -> None:
    errors = [e for o in _render(path) for e in validate_object(o)]
    assert errors == []


LOCAL_KINDS = ["PersistentVolumeClaim", "Deployment", "Service", "PodDisruptionBudget"]


@pytest.mark.parametrize(("sample", "kinds"), [
    ("gemma4-26b-amd", [*LOCAL_KINDS, "ScaledObject", "HTTPScaledObject", "ServiceMonitor"]),
    ("gemma4-31b-nvidia", [*LOCAL_KINDS, "ScaledObject", "ServiceMonitor"]),
    ("qwen35-9b-cpu", [*LOCAL_KINDS, "ScaledObject"]),
    ("gpt55-remote", ["ConfigMap", "Deployment", "Service", "PodDisruptionBudget",
                      "NetworkPolicy", "ServiceMonitor"]),
    ("llama-cpu-s3", [*LOCAL_KINDS, "ServiceMonitor"]),
])
def test_children_per_sample(sample: str, kinds: list[str]) -> None:
    path = next(p for p in ALL_SAMPLES if p.stem == sample)
    assert [o["kind"] for o in _render(path)] == kinds


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.stem)
def test_keda_owns_replicas_exactly_when_a_scaledobject_exists(path: Path) -> None:
    objects = _by_kind(_render(path))
    workload = objects.get("Deployment") or objects["LeaderWorkerSet"]
    assert ("replicas" in workload["spec"]) is ("ScaledObject" not in objects)


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.stem)
def test_children_are_owned_and_labelled(path: Path) -> None:
    name = load_yaml(path)["metadata"]["name"]
    for obj in _render(path):
        meta = obj["metadata"]
        assert meta["ownerReferences"][0]["uid"] == UID
        assert meta["ownerReferences"][0]["controller"] is True
        assert meta["labels"]["ai.example.io/model-name"] == name
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "llm-operator"


@pytest.mark.parametrize("path", ALL_SAMPLES, ids=lambda p: p.stem)
def test_rendering_is_deterministic(path: Path) -> None:
    assert _render(path) == _render(path)


def test_no_owner_references_without_uid() -> None:
    objects = render(parse_llmmodel(load_yaml(GUIDE_SAMPLES[0])))
    assert all("ownerReferences" not in o["metadata"] for o in objects)


def test_scaledobject_follows_the_guide() -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-26b-amd")
    spec = _by_kind(_render(path))["ScaledObject"]["spec"]
    assert (spec["minReplicaCount"], spec["maxReplicaCount"], spec["cooldownPeriod"],
            spec["pollingInterval"]) == (0, 3, 300, 15)
    prom = spec["triggers"][0]["metadata"]
    assert prom["query"] == ('sum(vllm:num_requests_waiting{namespace="ai-models",'
                             'pod=~"gemma4-26b-amd-([a-z0-9]+-[a-z0-9]+|[0-9]+)"})')
    assert (prom["threshold"], prom["activationThreshold"]) == ("3", "0")
    assert spec["triggers"][1] == {"type": "external-push", "metadata": {
        "scalerAddress": "keda-add-ons-http-external-scaler.keda:9090",
        "httpScaledObject": "gemma4-26b-amd-http"}}


def test_with_the_router_its_held_requests_wake_a_model_at_zero() -> None:
    """No HTTP add-on: the router holds the first request and KEDA activates on it."""
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-26b-amd")
    settings = Settings.model_validate({"router": {"enabled": True},
                                        "keda": {"httpAddon": {"enabled": False}}})
    objects = _by_kind(_render(path, settings))
    assert "HTTPScaledObject" not in objects
    triggers = objects["ScaledObject"]["spec"]["triggers"]
    assert [t["type"] for t in triggers] == ["prometheus", "prometheus"]
    assert triggers[1]["metadata"]["query"] == \
        'sum(llmop_router_pending_requests{namespace="ai-models",model="gemma4-26b-amd"})'
    assert triggers[1]["metadata"]["activationThreshold"] == "0"
    for obj in objects.values():
        assert validate_object(obj) == []


def test_http_scaledobject_skips_its_own_scaledobject() -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-26b-amd")
    http = _by_kind(_render(path))["HTTPScaledObject"]
    assert http["metadata"]["annotations"] == {
        "httpscaledobject.keda.sh/skip-scaledobject-creation": "true"}
    assert http["spec"]["scaleTargetRef"]["service"] == "gemma4-26b-amd"
    assert http["spec"]["hosts"] == ["gemma4-26b-amd.ai-models.svc.cluster.local"]


@pytest.mark.parametrize(("sample", "key", "count"), [
    ("gemma4-26b-amd", "amd.com/gpu", "1"),
    ("qwen36-35b-gaudi", "habana.ai/gaudi", "1"),
    ("gemma4-31b-nvidia", "nvidia.com/gpu", "1"),
    ("maverick-nvidia-tp4", "nvidia.com/gpu", "4"),
])
def test_accelerator_resource_key(sample: str, key: str, count: str) -> None:
    path = next(p for p in ALL_SAMPLES if p.stem == sample)
    pod = _by_kind(_render(path))["Deployment"]["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits[key] == count
    assert pod["tolerations"][0]["key"] == key


def test_cpu_model_requests_no_accelerator() -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "qwen35-9b-cpu")
    pod = _by_kind(_render(path))["Deployment"]["spec"]["template"]["spec"]
    assert set(pod["containers"][0]["resources"]["limits"]) == {"cpu", "memory"}
    assert "nodeSelector" not in pod and "tolerations" not in pod


def test_multi_accelerator_tensor_parallel_pod() -> None:
    path = next(p for p in EDGE_SAMPLES if p.stem == "maverick-nvidia-tp4")
    pod = _by_kind(_render(path))["Deployment"]["spec"]["template"]["spec"]
    assert pod["hostIPC"] is True and "hostNetwork" not in pod
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    args = pod["containers"][0]["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "4"


def test_hugging_face_token_only_reaches_the_downloader() -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-31b-nvidia")
    pod = _by_kind(_render(path))["Deployment"]["spec"]["template"]["spec"]
    fetch = pod["initContainers"][0]
    token = next(e for e in fetch["env"] if e["name"] == "HF_TOKEN")
    assert token["valueFrom"]["secretKeyRef"] == {"name": "hf-token", "key": "token"}
    assert fetch["command"][:2] == ["timeout", "7200"]
    assert all(e["name"] != "HF_TOKEN" for e in pod["containers"][0]["env"])


def test_remote_gateway_reads_the_key_from_the_secret_file() -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gpt55-remote")
    objects = _by_kind(_render(path))
    config = yaml.safe_load(objects["ConfigMap"]["data"]["gateway.yaml"])
    route = config["routes"][0]
    assert route["upstream"]["apiKey"] == {"file": "/var/run/secrets/llmop/upstream/apiKey"}
    assert route["rateLimit"] == {"requestsPerMinute": 5000}  # 10000 rpm over 2 replicas
    assert route["pricing"] == {"inputPerMillion": 5.0, "outputPerMillion": 30.0}
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    secret = next(v for v in pod["volumes"] if v["name"] == "api-key")["secret"]
    assert secret == {"secretName": "openai-api-key",
                      "items": [{"key": "apiKey", "path": "apiKey"}]}
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_gateway_config_change_rolls_pods() -> None:
    doc = sample_doc("gpt55-remote")
    before = _by_kind(render(parse_llmmodel(doc)))["Deployment"]
    doc2 = copy.deepcopy(doc)
    doc2["spec"]["remoteApi"]["rateLimitRpm"] = 100
    after = _by_kind(render(parse_llmmodel(doc2)))["Deployment"]

    def digest(d: dict[str, Any]) -> str:
        return str(d["spec"]["template"]["metadata"]["annotations"]["ai.example.io/config-hash"])

    assert digest(before) != digest(after)


def test_settings_override_images_selectors_and_storage() -> None:
    settings = Settings.model_validate({
        "images": {"engines": {"nvidia": {"vllm": "mirror.local/vllm:v0.33.0"}},
                   "operator": "mirror.local/llm-operator:v0.1.0", "pullSecrets": ["mirror"]},
        "vendors": {"nvidia": {"nodeSelector": {"pool": "h100"}, "tolerations": []}},
        "storage": {"storageClassName": "fast-nvme", "accessMode": "ReadWriteMany"},
        "prometheusAddress": "http://prom.monitoring:9090",
    })
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-31b-nvidia")
    objects = _by_kind(_render(path, settings))
    pod = objects["Deployment"]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "mirror.local/vllm:v0.33.0"
    assert pod["initContainers"][0]["image"] == "mirror.local/llm-operator:v0.1.0"
    assert pod["nodeSelector"] == {"pool": "h100"} and "tolerations" not in pod
    assert pod["imagePullSecrets"] == [{"name": "mirror"}]
    pvc = objects["PersistentVolumeClaim"]["spec"]
    assert (pvc["storageClassName"], pvc["accessModes"]) == ("fast-nvme", ["ReadWriteMany"])
    trigger = objects["ScaledObject"]["spec"]["triggers"][0]
    assert trigger["metadata"]["serverAddress"] == "http://prom.monitoring:9090"


@pytest.mark.parametrize(("autoscaler", "kinds"), [
    ("auto", {"ScaledObject"}),  # a cluster without KEDA skips it; the operator scales then
    ("keda", {"ScaledObject"}),
    ("builtin", set()),  # the operator writes the Deployment's scale itself
])
def test_keda_objects_follow_the_autoscaler_setting(autoscaler: str, kinds: set[str]) -> None:
    path = next(p for p in GUIDE_SAMPLES if p.stem == "gemma4-26b-amd")  # minReplicas 0
    settings = Settings.model_validate({"autoscaler": autoscaler, "router": {"enabled": True},
                                        "keda": {"httpAddon": {"enabled": False}}})
    objects = _by_kind(_render(path, settings))
    assert {"ScaledObject", "HTTPScaledObject"} & set(objects) == kinds
    assert "replicas" not in objects["Deployment"]["spec"]  # whoever scales owns it


@pytest.mark.parametrize(("case", "patch", "settings", "words"), [
    ("scale to zero, built-in autoscaler, no router", {"scaling": {"minReplicas": 0}},
     {"autoscaler": "builtin"}, "needs the router .*: the built-in autoscaler wakes a model"),
    ("does not fit", {"totalParametersBillions": 400, "quantization": "AWQ", "resources": {
        "preferredAcceleratorModel": "H100", "vramPerAcceleratorGiB": 80}}, {},
     "gives 72.0 GiB: set resources.acceleratorCount: 4"),
    ("scale to zero without the add-on", {"scaling": {"minReplicas": 0}},
     {"keda": {"httpAddon": {"enabled": False}}}, "needs the router .* or the KEDA HTTP"),
    ("ollama flag", {"acceleratorVendor": "cpu", "inferenceEngine": "ollama",
                     "quantization": "GGUF-Q4_K_M", "resources": {"acceleratorCount": 0},
                     "engineArgs": {"top-k": "5"}}, {}, "Ollama takes no flags"),
    ("a file relative to the YAML", {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
                                     "quantization": "GGUF-Q4_K_M", "resources": {
                                         "acceleratorCount": 0},
                                     "modelSource": {"type": "file", "path": "m.gguf"}}, {},
     "'m.gguf' is relative: in a cluster give the GGUF file's absolute path on the node"),
    ("a model pip installed", {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
                               "quantization": "GGUF-Q4_K_M", "resources": {
                                   "acceleratorCount": 0},
                               "modelSource": {"type": "file", "pythonPackage": "a-gguf"}}, {},
     "a model installed by pip lives on one machine"),
])
def test_unplaceable_models_render_nothing(base_local: dict[str, Any], case: str,
                                           patch: dict[str, Any], settings: dict[str, Any],
                                           words: str) -> None:
    doc = copy.deepcopy(base_local)
    doc["spec"].update(patch)
    with pytest.raises(RenderError, match=words):
        render(parse_llmmodel(doc), Settings.model_validate(settings))


# (case, spec patch, the field the refusal names): 405B or 70B at BF16 on H100s.
H100 = {"preferredAcceleratorModel": "H100", "acceleratorCount": 8}
FIT_FIELDS = [
    ("too few cards on one node", {"totalParametersBillions": 70, "quantization": "BF16",
                                   "resources": {**H100, "acceleratorCount": 1}},
     "spec.resources.acceleratorCount"),
    ("serving.nodes pinned too low", {"totalParametersBillions": 405, "quantization": "BF16",
                                      "resources": H100, "serving": {"nodes": 1}},
     "spec.serving.nodes"),
    ("serving.nodes 2 for a model that needs 5", {
        "totalParametersBillions": 1400, "quantization": "BF16", "resources": H100,
        "serving": {"nodes": 2}}, "spec.serving.nodes"),
    ("a prefill role too small", {
        "totalParametersBillions": 70, "quantization": "BF16",
        "resources": {**H100, "acceleratorCount": 4}, "serving": {"disaggregation": {
            "prefill": {"replicas": 1, "resources": {"acceleratorCount": 1}},
            "decode": {"replicas": 1}}}},
     "spec.serving.disaggregation.prefill.resources.acceleratorCount"),
]


@pytest.mark.parametrize(("case", "patch", "field"), FIT_FIELDS, ids=[f[0] for f in FIT_FIELDS])
def test_a_model_that_does_not_fit_names_the_field_to_change(
        base_local: dict[str, Any], case: str, patch: dict[str, Any], field: str) -> None:
    doc = copy.deepcopy(base_local)
    doc["spec"].update(patch)
    with pytest.raises(RenderError) as refused:
        render(parse_llmmodel(doc), Settings())
    assert [p.path for p in refused.value.problems] == [field]
    assert f"set {field.removeprefix('spec.')}: " in str(refused.value)


@pytest.mark.parametrize(("millicores", "quantity"), [(8000, "8"), (500, "500m"), (2500, "2500m")])
def test_cpu_is_rendered_in_canonical_form(millicores: int, quantity: str) -> None:
    assert cpu_quantity(millicores) == quantity


@pytest.mark.parametrize(("base_url", "redis_url", "ports"), [
    ("https://api.openai.com/v1", None, [443]),
    ("http://vllm.inference.svc:8080/v1", None, [8080]),
    ("http://proxy.example.com/v1", None, [80]),
    # limits shared in Redis: its port too, or every replica falls back to local limits
    ("https://api.openai.com/v1", "redis://llmop-redis.ai-models.svc:6379/0", [443, 6379]),
    ("https://api.openai.com/v1", "rediss://redis.example.com:6380/0", [443, 6380]),
    ("https://api.openai.com/v1", "redis://redis.infra.svc/0", [443, 6379]),
])
def test_the_gateway_may_only_reach_dns_its_providers_port_and_redis(
        base_url: str, redis_url: str | None, ports: list[int]) -> None:
    doc = sample_doc("gpt55-remote")
    doc["spec"]["remoteApi"]["baseUrl"] = base_url
    settings = Settings.model_validate({"gateway": {"redisUrl": redis_url}})
    policy = next(o for o in render(parse_llmmodel(doc), settings)
                  if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["egress"][1] == {"ports": [{"protocol": "TCP", "port": p}
                                                     for p in ports]}
    assert policy["spec"]["podSelector"]["matchLabels"]["ai.example.io/model-name"] == \
        "gpt55-remote"


@pytest.mark.parametrize(("gateway", "env", "ports"), [
    ({}, None, [443]),
    ({"egressProxy": "http://egress.corp:3128"},
     {"HTTPS_PROXY": "http://egress.corp:3128", "HTTP_PROXY": "http://egress.corp:3128",
      "NO_PROXY": ".svc,.cluster.local"}, [443, 3128]),
    ({"egressProxy": "http://10.0.0.9:8080/", "noProxy": ["10.0.0.0/8", "*.corp"]},
     {"HTTPS_PROXY": "http://10.0.0.9:8080/", "HTTP_PROXY": "http://10.0.0.9:8080/",
      "NO_PROXY": "10.0.0.0/8,*.corp"}, [443, 8080]),
])
def test_an_egress_proxy_reaches_the_gateways_environment_and_network_policy(
        gateway: dict[str, Any], env: dict[str, str] | None, ports: list[int]) -> None:
    objects = render(parse_llmmodel(sample_doc("gpt55-remote")),
                     Settings.model_validate({"gateway": gateway}))
    container = next(o for o in objects if o["kind"] == "Deployment")[
        "spec"]["template"]["spec"]["containers"][0]
    assert ({e["name"]: e["value"] for e in container["env"]} if "env" in container
            else None) == env
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["egress"][1] == {"ports": [{"protocol": "TCP", "port": p}
                                                     for p in ports]}
    assert [e for o in objects for e in validate_object(o)] == []
    if env:  # what the gateway reads from it: the provider through the proxy
        proxy = proxy_settings(env).for_target("https", "api.openai.com", 443)
        assert proxy is not None and proxy.label == env["HTTPS_PROXY"].split("//")[1].strip("/")


@pytest.mark.parametrize(("proxy", "words"), [
    ("https://egress.corp:3128", "String should match pattern"),
    ("http://user:pw@egress.corp:3128", "String should match pattern"),
    ("http://egress.corp", "egressProxy: give the proxy as http://host:port"),
])
def test_an_egress_proxy_setting_must_be_a_plain_http_host_and_port(proxy: str,
                                                                   words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        Settings.model_validate({"gateway": {"egressProxy": proxy}})


def test_the_gateways_network_policy_can_be_left_to_the_cluster() -> None:
    settings = Settings.model_validate({"gateway": {"networkPolicy": False}})
    doc = sample_doc("gpt55-remote")
    assert "NetworkPolicy" not in [o["kind"] for o in render(parse_llmmodel(doc), settings)]


@pytest.mark.parametrize(("sample", "sha256", "init"), [
    ("qwen35-9b-cpu", "ab" * 32, ["model-fetch", "model-verify", "model-prepare"]),
    ("qwen35-9b-cpu", None, ["model-fetch", "model-verify", "model-prepare"]),
    ("gemma4-31b-nvidia", None, ["model-fetch"]),  # safetensors for vLLM: no GGUF to check
])
def test_gguf_models_are_checked_between_download_and_serving(
        sample: str, sha256: str | None, init: list[str]) -> None:
    doc = sample_doc(sample)
    if sha256:
        doc["spec"].setdefault("modelSource", {"type": "huggingface"})["sha256"] = sha256
    pod = next(o for o in render(parse_llmmodel(doc)) if o["kind"] == "Deployment")[
        "spec"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == init
    if "model-verify" not in init:
        return
    verify = pod["initContainers"][1]
    assert verify["image"] == Settings().images.operator
    assert ("--sha256" in verify["command"]) is (sha256 is not None)
    # the command is one `llmop model-verify` accepts (click raises on anything else)
    command = cli.get_command(click.Context(cli), "model-verify")
    assert command is not None and verify["command"][:2] == ["llmop", "model-verify"]
    command.make_context("model-verify", verify["command"][2:])


def _pod_template(doc: dict[str, Any]) -> dict[str, Any]:
    template: dict[str, Any] = next(o for o in render(parse_llmmodel(doc))
                                    if o["kind"] == "Deployment")["spec"]["template"]
    return template


@pytest.mark.parametrize(("llama_cpp", "engine_args", "flags"), [
    ({"parallelSlots": 4}, None, ["--ctx-size", "131072", "--parallel", "4"]),  # 4 x 32K
    ({"parallelSlots": 2}, {"ctx-size": "4096"}, ["--ctx-size", "8192", "--parallel", "2"]),
    ({"flashAttention": True, "mlock": True}, None,
     ["--ctx-size", "32768", "--parallel", "1", "--flash-attn", "on", "--load-mode",
      "mmap+mlock"]),
    ({"flashAttention": False}, None,
     ["--ctx-size", "32768", "--parallel", "1", "--flash-attn", "off"]),
    # always --parallel: llama-server's own default is 4 slots sharing one KV cache
    (None, {"ctx-size": "4096"}, ["--parallel", "1", "--ctx-size", "4096"]),
])
def test_llama_cpp_settings_become_server_flags(llama_cpp: dict[str, Any] | None,
                                                engine_args: dict[str, str] | None,
                                                flags: list[str]) -> None:
    doc = sample_doc("llama-cpu-s3")
    doc["spec"]["engineArgs"] = engine_args
    doc["spec"]["llamaCpp"] = llama_cpp
    doc["spec"]["resources"]["memoryGiB"] = 64  # four slots of 32K need the room
    args = _pod_template(doc)["spec"]["containers"][0]["args"]
    picked = [a for i, a in enumerate(args) if a in {
        "--ctx-size", "--parallel", "--flash-attn", "--load-mode"} or (
        i and args[i - 1] in {"--ctx-size", "--parallel", "--flash-attn", "--load-mode"})]
    assert picked == flags


@pytest.mark.parametrize("sample", ["llama-cpu-s3", "gpt55-remote"])
def test_pod_labels_and_annotations_join_ours_and_ours_win(sample: str) -> None:
    doc = sample_doc(sample)
    doc["spec"]["podLabels"] = {"team": "search"}
    doc["spec"]["podAnnotations"] = {"example.com/owner": "me", "prometheus.io/scrape": "false"}
    template = _pod_template(doc)
    assert template["metadata"]["labels"]["team"] == "search"
    assert template["metadata"]["annotations"]["example.com/owner"] == "me"
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true"  # ours
    assert "runtimeClassName" not in template["spec"]
    for obj in render(parse_llmmodel(doc)):
        assert validate_object(obj) == []


def test_runtime_class_reaches_the_inference_pods() -> None:
    doc = sample_doc("gemma4-31b-nvidia")
    doc["spec"]["runtimeClassName"] = "nvidia"
    assert _pod_template(doc)["spec"]["runtimeClassName"] == "nvidia"
