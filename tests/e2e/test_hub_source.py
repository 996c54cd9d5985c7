"""On the real node: models downloaded from a Hugging Face server by the model-fetch init container.

olah (tests/hubserver.py) serves, on the node's address, the repos a mirror of the Hub would
hold: google/gemma-3-270m (the BF16 directory tools/gemma_hf.py writes) and a GGUF repo.
The operator's settings point downloads at it (huggingFaceEndpoint: HF_ENDPOINT). Each
model's cache claim is bound to a hostPath volume the test makes (no provisioner here).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gemma_hf
import openai
import pytest
from e2e_cluster import GEMMA_DIR, GEMMA_FILE, MODELS_NS, NodeCluster

from hubserver import hub, make_repo
from prompts import assert_vllm_chat_reaches_the_model
from realnode import NODE_IP

from samples import REPO, load_yaml

pytestmark = [pytest.mark.e2e, pytest.mark.late]
NS = MODELS_NS
HUB_PORT = 8090  # tests/e2e/install/settings.yaml: huggingFaceEndpoint
GGUF_REPO = "test/gemma-3-270m-GGUF"
LORAS = {"sql": "test/gemma-3-270m-lora-sql", "tone": "test/gemma-3-270m-lora-tone"}
TOKEN = "hf_e2eNotARealToken0000"
VOLUMES = Path("/var/lib/llmop-e2e-volumes")
QUESTION = "Q: What is the capital of France?\nA:"
HF_VLLM = "gemma-270m-vllm-hf"  # examples/cluster/gemma-270m-vllm-hf.yaml
HF_VLLM_TEST = "test_the_vllm_example_downloads_its_repo_and_hot_loads_adapters"


@pytest.fixture(scope="module")
def hub_node(kube_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory,
             request: pytest.FixtureRequest) -> Iterator[NodeCluster]:
    kube_node.wait_for_images()  # the Hugging Face directory, built in the background
    mirrors = tmp_path_factory.mktemp("hub") / "mirrors"
    make_repo(mirrors, "google/gemma-3-270m", {p.name: p for p in GEMMA_DIR.iterdir()})
    make_repo(mirrors, GGUF_REPO, {"gemma-3-270m-Q4_K_M.gguf": GEMMA_FILE,
                                   "README.md": b"# Gemma 3 270M, Q4_K_M\n"})
    for seed, repo in enumerate(LORAS.values(), start=1):
        make_repo(mirrors, repo, {p.name: p for p in gemma_hf.gemma_lora(seed).iterdir()})
    kube_node.namespace(NS)
    kube_node.kubectl("-n", NS, "delete", "secret", "hf-token", "--ignore-not-found")
    kube_node.kubectl("-n", NS, "create", "secret", "generic", "hf-token",
                      f"--from-literal=token={TOKEN}")
    with kube_node.own_models(), hub(mirrors, host=NODE_IP, port=HUB_PORT):
        if any(item.name == HF_VLLM_TEST for item in request.session.items):
            # vLLM's download and cold start (~2 minutes, one core) run beside the llama.cpp
            # tests (half a core each) rather than after them: the node holds both
            _cache_volume(kube_node, HF_VLLM)
            kube_node.kubectl("apply", "-f", "-", stdin=json.dumps(_hf_vllm_example()))
        yield kube_node
    kube_node.kubectl("-n", NS, "delete", "secret", "hf-token")


def _cache_volume(node: NodeCluster, model: str, claim: str | None = None) -> None:
    """A hostPath volume bound to the model's cache claim (its pods run as 65532)."""
    claim = claim or f"{model}-model-cache"
    path = VOLUMES / model
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    path.chmod(0o777)
    node.kubectl("apply", "-f", "-", stdin=json.dumps({
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"e2e-{model}"},
        "spec": {"capacity": {"storage": "50Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain",
                 "hostPath": {"path": str(path), "type": "Directory"},
                 "claimRef": {"namespace": NS, "name": claim}}}))


def _gone(node: NodeCluster, model: str) -> None:
    """The model, its pods (not left draining: the next test's pod waited 10 s for the cores
    of one) and its volume."""
    node.clear_models(model)
    node.kubectl("delete", "pv", f"e2e-{model}", "--wait=false")


def _gguf_model(name: str, repo: str, quantization: str) -> dict[str, Any]:
    return {
        "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"modelId": repo, "deploymentMode": "local", "acceleratorVendor": "cpu",
                 "inferenceEngine": "llamacpp", "totalParametersBillions": 0.27,
                 "quantization": quantization, "engineArgs": {"ctx-size": "2048"},
                 "resources": {"acceleratorCount": 0, "cpuMillicores": 500, "memoryGiB": 1},
                 "scaling": {"minReplicas": 1, "maxReplicas": 1},
                 "modelSource": {"type": "huggingface", "huggingFaceTokenSecret": "hf-token"}},
    }


# (case, repo, quantization, reason, words of the reason's message)
REFUSED = [
    ("no such repo", "test/gemma-3-270m-NOPE", "GGUF-Q4_K_M", "RepoNotFound",
     f"test/gemma-3-270m-NOPE on http://{NODE_IP}:{HUB_PORT} does not exist"),
    ("no file of the quantization", GGUF_REPO, "GGUF-Q8_0", "NoMatchingFile",
     f"no file of {GGUF_REPO} on http://{NODE_IP}:{HUB_PORT} matches *Q8_0*.gguf"),
]


@pytest.mark.parametrize(("case", "repo", "quantization", "reason", "words"), REFUSED,
                         ids=[r[0] for r in REFUSED])
def test_a_source_that_cannot_be_fetched_fails_the_model_with_the_reason(
        hub_node: NodeCluster, case: str, repo: str, quantization: str, reason: str,
        words: str) -> None:
    name = f"hub-{reason.lower()}"
    _cache_volume(hub_node, name)
    hub_node.kubectl("apply", "-f", "-", stdin=json.dumps(_gguf_model(name, repo,
                                                                      quantization)))
    hub_node.wait_phase(NS, name, "Failed", 120)
    model = hub_node.json("-n", NS, "get", "llmmodel", name)
    conditions = {c["type"]: c for c in model["status"]["conditions"]}
    assert conditions["Degraded"]["reason"] == reason, conditions
    said = conditions["Ready"]["message"]
    assert words in said, said
    assert "Secret hf-token" in said or reason == "NoMatchingFile"
    (pod,) = hub_node.json("-n", NS, "get", "pods", "-l", f"app={name}")["items"]
    (fetch,) = pod["status"]["initContainerStatuses"][:1]
    assert fetch["name"] == "model-fetch"
    said = json.dumps(model) + hub_node.kubectl("get", "events", "-n", NS, "-o", "json")
    said += hub_node.kubectl("-n", NS, "logs", pod["metadata"]["name"], "-c", "model-fetch")
    assert TOKEN not in said
    _gone(hub_node, name)


def test_llama_cpp_downloads_only_its_quantizations_file(hub_node: NodeCluster) -> None:
    name = "hub-gguf"
    _cache_volume(hub_node, name)
    hub_node.kubectl("apply", "-f", "-", stdin=json.dumps(_gguf_model(name, GGUF_REPO,
                                                                      "GGUF-Q4_K_M")))
    hub_node.wait_phase(NS, name, "Ready", 180)
    assert sorted(p.name for p in (VOLUMES / name / "source").iterdir()
                  if not p.name.startswith(".")) == ["gemma-3-270m-Q4_K_M.gguf"]
    client = openai.OpenAI(base_url=hub_node.service_url(NS, name, 8000), api_key="unused",
                           timeout=60)
    answer = client.completions.create(model=GGUF_REPO, prompt=QUESTION, max_tokens=16,
                                       stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    _gone(hub_node, name)


def _served(node: NodeCluster, name: str) -> set[str]:
    client = openai.OpenAI(base_url=node.service_url(NS, name, 8000), api_key="unused",
                           timeout=60)
    return {m.id for m in client.models.list()}


def _hf_vllm_example() -> dict[str, Any]:
    """The HF example with two LoRA adapters from the same server."""
    doc = load_yaml(REPO / "examples" / "cluster" / "gemma-270m-vllm-hf.yaml")
    assert doc["metadata"]["name"] == HF_VLLM
    doc["spec"]["loraAdapters"] = [
        {"name": adapter, "rank": 8, "source": {"type": "huggingface", "repo": repo,
                                                "huggingFaceTokenSecret": "hf-token"}}
        for adapter, repo in LORAS.items()]
    # what the test checks is the download and the adapters, not vLLM's compile: eager
    # mode starts the pod ~140 s sooner on one core (docs/benchmarks.md, bench/vllm)
    doc["spec"]["engineArgs"] = {"enforce-eager": "true"}
    return doc


def test_the_vllm_example_downloads_its_repo_and_hot_loads_adapters(
        hub_node: NodeCluster) -> None:
    """lora-sync downloads the adapters and loads them into the running vLLM, and unloads
    one the spec drops, with no restart (the model was applied when the module started)."""
    doc, name = _hf_vllm_example(), HF_VLLM
    hub_node.wait_phase(NS, name, "Ready", 420)
    fetched = sorted(p.name for p in (VOLUMES / name / "source").iterdir()
                     if not p.name.startswith("."))
    assert fetched == sorted(p.name for p in GEMMA_DIR.iterdir())
    client = openai.OpenAI(base_url=hub_node.service_url(NS, name, 8000), api_key="unused",
                           timeout=60)
    base = client.completions.create(model="google/gemma-3-270m", prompt=QUESTION,
                                     max_tokens=16, stop=["\n"], temperature=0)
    assert "Paris" in base.choices[0].text
    # the downloaded repo's own chat template: the conversation reaches the model
    assert_vllm_chat_reaches_the_model(hub_node.service_url(NS, name, 8000, ""),
                                       "google/gemma-3-270m")
    (pod,) = hub_node.json("-n", NS, "get", "pods", "-l", f"app={name}")["items"]
    assert _served(hub_node, name) == {"google/gemma-3-270m", *LORAS}
    adapted = client.completions.create(model="sql", prompt=QUESTION, max_tokens=16,
                                        stop=["\n"], temperature=0)
    assert adapted.model == "sql" and adapted.choices[0].text != base.choices[0].text
    doc["spec"]["loraAdapters"] = doc["spec"]["loraAdapters"][:1]  # "tone" goes
    hub_node.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    deadline = time.monotonic() + 120
    while "tone" in _served(hub_node, name):
        assert time.monotonic() < deadline, "lora-sync did not unload the adapter"
        time.sleep(1)  # the kubelet refreshes the mounted ConfigMap on its own period
    (after,) = hub_node.json("-n", NS, "get", "pods", "-l", f"app={name}")["items"]
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]
    assert {c["name"]: c["restartCount"] for c in after["status"]["containerStatuses"]} == {
        "inference-server": 0, "lora-sync": 0}
    again = client.completions.create(model="google/gemma-3-270m", prompt=QUESTION,
                                      max_tokens=16, stop=["\n"], temperature=0)
    assert again.choices[0].text == base.choices[0].text
    _gone(hub_node, name)


POOL = REPO / "examples" / "cluster" / "model-pool"


def _pool_member(example: str, name: str) -> dict[str, Any]:
    """A member of the pool "hub-small" (two loaded), from one of examples/cluster/model-pool."""
    doc = load_yaml(POOL / f"{example}.yaml")
    doc["metadata"]["name"] = name
    doc["spec"]["modelId"] = name
    doc["spec"]["mcpExposure"]["toolName"] = name.replace("-", "_")
    doc["spec"]["pool"] = {"name": "hub-small", "maxLoaded": 2}
    doc["spec"]["scaling"] = {"minReplicas": 1, "maxReplicas": 1}
    return doc


def test_a_pool_member_downloaded_from_the_hub_serves_beside_a_node_file(
        hub_node: NodeCluster) -> None:
    """A llama.cpp pool of a node file and a Hugging Face member: the pool's pod downloads
    the member into a claim of its own, links the file of its quantization for the preset,
    and serves both; a rollout of the pool downloads nothing again."""
    local = _pool_member("gemma-pool-chat", "hub-pool-file")
    hub = _pool_member("gemma-pool-qa", "hub-pool-repo")
    hub["spec"]["modelId"] = GGUF_REPO
    hub["spec"]["modelSource"] = {"type": "huggingface", "huggingFaceTokenSecret": "hf-token"}
    _cache_volume(hub_node, "hub-pool-repo", "hub-pool-repo-pool-cache")
    for doc in (local, hub):
        hub_node.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    try:
        for name in ("hub-pool-file", "hub-pool-repo"):
            hub_node.wait_phase(NS, name, "Ready", 240)
        cache = VOLUMES / "hub-pool-repo"
        fetched = cache / "source" / "gemma-3-270m-Q4_K_M.gguf"
        assert (cache / "model.gguf").resolve() == fetched.resolve()
        assert sorted(p.name for p in fetched.parent.iterdir()
                      if not p.name.startswith(".")) == [fetched.name]  # its quantization
        downloaded = fetched.stat().st_mtime_ns
        with openai.OpenAI(base_url=hub_node.service_url(NS, "hub-small-pool", 8000),
                           api_key="unused", timeout=60) as client:
            for model_id in (GGUF_REPO, "hub-pool-file"):
                answer = client.completions.create(model=model_id, prompt=QUESTION,
                                                   max_tokens=16, stop=["\n"], temperature=0)
                assert "Paris" in answer.choices[0].text, model_id
        hub_node.kubectl("-n", NS, "rollout", "restart", "deployment/hub-small-pool")
        hub_node.kubectl("-n", NS, "rollout", "status", "deployment/hub-small-pool",
                         "--timeout=180s")
        with openai.OpenAI(base_url=hub_node.service_url(NS, "hub-small-pool", 8000),
                           api_key="unused", timeout=60, max_retries=3) as client:
            answer = client.completions.create(model=GGUF_REPO, prompt=QUESTION,
                                               max_tokens=16, stop=["\n"], temperature=0)
        assert "Paris" in answer.choices[0].text
        assert fetched.stat().st_mtime_ns == downloaded  # kept in its claim, not fetched again
    finally:
        _gone(hub_node, "hub-pool-repo")
        hub_node.clear_models("hub-pool-file")
