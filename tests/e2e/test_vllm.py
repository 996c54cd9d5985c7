"""On the real node: vLLM's CPU build serves the Gemma example through what the operator renders.

examples/cluster/gemma-270m-vllm.yaml, applied as its header says: a Hugging Face model
directory on the node (tools/gemma_hf.py), vLLM from the image tools/images.py builds, with
the KV space, threads and dtype the renderer derives from the spec. Its Service, its real
`vllm:*` metrics, the router and the MCP server answer for it.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
import yaml
from e2e_cluster import (
    GEMMA,
    GEMMA_VLLM,
    GEMMA_VLLM_ID,
    GEMMA_VLLM_NAME,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
)

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.engines import serve, vllm_sleeper
from llm_operator.profiles.settings import Settings
from llm_operator.render import render
from monitoring.promtool import rule_groups, write_rules
from monitoring.scrape import pod_monitor_jobs
from prompts import assert_vllm_chat_reaches_the_model

from controlplane import free_port
from samples import REPO, load_yaml

pytestmark = [pytest.mark.e2e, pytest.mark.late]
E2E = REPO / "tests" / "e2e"
NS, NAME = MODELS_NS, GEMMA_VLLM_NAME
QUESTION = "Q: What is the capital of France?\nA:"
# A cold start compiles vLLM's graphs with torch.compile (~1-2 minutes on one core).
READY_SECONDS = 420
COMPILE_CACHE = Path("/var/cache/llm-operator/compile")  # tests/e2e/install/settings.yaml


@pytest.fixture(scope="module")
def vllm(kube_node: NodeCluster) -> Iterator[NodeCluster]:
    """The vLLM example Ready (then deleted: it holds a core and 6 GiB of the node)."""
    kube_node.wait_for_images()
    kube_node.namespace(NS)
    with kube_node.own_models():
        kube_node.kubectl("apply", "-f", str(GEMMA_VLLM))
        kube_node.wait_phase(NS, NAME, "Ready", READY_SECONDS)
        yield kube_node


def test_vllm_answers_through_the_service_with_the_openai_sdk(vllm: NodeCluster) -> None:
    client = openai.OpenAI(base_url=vllm.service_url(NS, NAME, 8000), api_key="unused",
                           timeout=60)
    answer = client.completions.create(model=GEMMA_VLLM_ID, prompt=QUESTION, max_tokens=16,
                                       stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    assert [m.id for m in client.models.list()] == [GEMMA_VLLM_ID]
    (pod,) = vllm.json("-n", NS, "get", "pods", "-l", f"app={NAME}")["items"]
    (server,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in server["env"]}
    assert (env["VLLM_CPU_KVCACHE_SPACE"], env["OMP_NUM_THREADS"]) == ("1", "1")
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_chat_request_reaches_vllm_in_the_template_its_weights_carry(
        vllm: NodeCluster) -> None:
    """vLLM renders the messages with the model's own template (tools/gemma_hf.py's Q/A)."""
    assert_vllm_chat_reaches_the_model(vllm.service_url(NS, NAME, 8000, ""), GEMMA_VLLM_ID)


def _vllm_models() -> list[Any]:
    """Every vLLM model the repository ships (examples, samples), parsed."""
    found = []
    for path in sorted([*(REPO / "examples").rglob("*.yaml"),
                        *(REPO / "config/samples").rglob("*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "LLMModel" and doc["spec"].get(
                    "deploymentMode", "local") == "local" and doc["spec"].get(
                    "inferenceEngine", "vllm") == "vllm":
                found.append(parse_llmmodel(doc))
    return found


def test_every_flag_rendered_for_vllm_is_one_the_pinned_vllm_knows(vllm: NodeCluster) -> None:
    """vLLM's own --help, in the pod that runs it: a flag it renamed or dropped fails here,
    before a user's engine refuses to start."""
    (pod,) = vllm.json("-n", NS, "get", "pods", "-l", f"app={NAME}")["items"]
    text = vllm.plane.kubectl("-n", NS, "exec", pod["metadata"]["name"], "-c",
                              "inference-server", "--", "python3", "-m",
                              "vllm.entrypoints.openai.api_server", "--help=all",
                              timeout=300).stdout
    known = set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", text))
    assert {"--max-model-len", "--served-model-name", "--enable-sleep-mode"} <= known
    models = _vllm_models()
    assert len(models) >= 5
    rendered = set()
    for model in models:
        on_gpu = model.spec.accelerator_vendor != "cpu"
        rendered.update(a for a in serve(model.spec, on_gpu).args if a.startswith("--"))
        rendered.update(a for a in vllm_sleeper(model.spec, "/m", 8001, 0.4).args
                        if a.startswith("--"))
    assert not rendered - known, sorted(rendered - known)


def test_the_pod_exports_vllms_own_metrics_for_its_model(vllm: NodeCluster) -> None:
    """The series the router, the autoscaler, KEDA and the Prometheus rules read."""
    base = vllm.service_url(NS, NAME, 8000, "")
    text = httpx2.get(f"{base}/metrics", timeout=30).text
    for metric in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                   "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_count"):
        assert re.search(rf'^{metric}{{[^}}]*model_name="{GEMMA_VLLM_ID}"', text, re.M), metric


def test_the_router_answers_for_the_vllm_model(vllm: NodeCluster) -> None:
    vllm.apply_kustomization(E2E / "router", ["llmop-router"], OPERATOR_NS)
    client = openai.OpenAI(base_url=vllm.service_url(OPERATOR_NS, "llmop-router", 8080),
                           api_key="unused", timeout=60)
    answer = client.completions.create(model=GEMMA_VLLM_ID, prompt=QUESTION, max_tokens=16,
                                       stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text


async def test_the_mcp_server_calls_the_vllm_model_as_a_tool(vllm: NodeCluster) -> None:
    """Its chat API, through the tool: the chat template came with the converted model."""
    vllm.apply_kustomization(E2E / "mcp", ["mcp-server"], NS)
    answer = await vllm.ask_tool("gemma3_270m_vllm", "What is the capital of France?")
    assert "Paris" in answer


@pytest.fixture
def prometheus(vllm: NodeCluster, tmp_path: Path) -> Iterator[str]:
    """Debian's Prometheus on the node, scraping the pods the rendered PodMonitor selects
    (and the operator's metrics port; tests/monitoring/scrape.py), with config/monitoring's
    rules; LLMModelNotReady's `for:` shortened to 2 s in this copy only."""
    settings = Settings.model_validate({"monitoring": {"kind": "PodMonitor",
                                                       "interval": "2s"}})
    model = parse_llmmodel(load_yaml(GEMMA_VLLM))
    (monitor,) = [o for o in render(model, settings) if o["kind"] == "PodMonitor"]
    operator = {"metadata": {"name": "llm-operator", "namespace": OPERATOR_NS},
                "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "llm-operator"}},
                         "podMetricsEndpoints": [{"port": "metrics", "interval": "2s"}]}}
    pods = vllm.json("get", "pods", "-A")["items"]
    jobs = [job for m in (monitor, operator) for job in pod_monitor_jobs(m, pods)]
    assert all(job["static_configs"] for job in jobs), jobs
    groups = [g for g in rule_groups() if g["name"] in ("vllm.rules", "llm.alerts")]
    for rule in (r for g in groups for r in g["rules"]):
        if rule.get("alert") == "LLMModelNotReady":
            rule["for"] = "2s"
    rules = write_rules(tmp_path, groups)
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(rules)], "scrape_configs": jobs}))
    port = free_port()
    with (tmp_path / "prometheus.log").open("wb") as log:
        proc = subprocess.Popen([
            "prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _query(prometheus: str, expr: str) -> list[dict[str, Any]]:
    try:
        body = httpx2.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    except httpx2.TransportError:
        return []  # not listening yet
    result: list[dict[str, Any]] = body.json()["data"]["result"] if body.is_success else []
    return [r for r in result if r["value"][1] not in ("NaN", "+Inf", "-Inf")]


def test_prometheus_records_every_vllm_rule_on_the_real_series(
        vllm: NodeCluster, prometheus: str) -> None:
    """What the dashboards and alerts read, from the pod's own /metrics under load."""
    client = openai.OpenAI(base_url=vllm.service_url(NS, NAME, 8000), api_key="unused",
                           timeout=60)
    records = [r["record"] for g in rule_groups() if g["name"] == "vllm.rules"
               for r in g["rules"]]
    missing = set(records)
    deadline = time.monotonic() + 120
    while missing and time.monotonic() < deadline:
        client.completions.create(model=GEMMA_VLLM_ID, prompt=QUESTION, max_tokens=8,
                                  temperature=0)  # keeps the rates and histograms moving
        missing = {r for r in missing if not any(
            s["metric"].get("model_name") == GEMMA_VLLM_ID and s["metric"].get("namespace") == NS
            for s in _query(prometheus, r))}
    assert not missing, f"no series for {sorted(missing)}"


def test_llmmodelnotready_fires_for_a_broken_model(vllm: NodeCluster, prometheus: str) -> None:
    broken = load_yaml(GEMMA)
    broken["metadata"]["name"] = "gemma-broken"
    broken["spec"]["modelSource"] = {"type": "file", "path": "/var/lib/llm-models/missing.gguf"}
    broken["spec"]["mcpExposure"] = {"enabled": False}
    vllm.kubectl("apply", "-f", "-", stdin=json.dumps(broken))
    try:
        deadline = time.monotonic() + 120
        firing: list[dict[str, Any]] = []
        while not firing and time.monotonic() < deadline:
            firing = _query(prometheus, 'ALERTS{alertname="LLMModelNotReady",'
                                        'alertstate="firing",name="gemma-broken"}')
            time.sleep(1)  # Prometheus evaluates every 2 s; it has no push to wait on
        assert firing, "LLMModelNotReady did not fire for the broken model"
        assert not _query(prometheus, 'ALERTS{alertname="LLMModelNotReady",'
                                      f'name="{NAME}"}}')
    finally:
        vllm.kubectl("-n", NS, "delete", "llmmodel", "gemma-broken", "--wait=true")


def test_the_builtin_autoscaler_adds_a_replica_for_vllms_own_queue(vllm: NodeCluster) -> None:
    """Requests straight to the Service (the router holds none of them): vLLM runs
    max-num-seqs 4 at once and queues the rest, the router reads vllm:num_requests_waiting
    from the pod, and the operator scales the model 1 -> 2 (the second replica does not fit
    the node's 2 cores beside the first: it stays Pending, which is not what is tested)."""
    vllm.apply_kustomization(E2E / "router", ["llmop-router"], OPERATOR_NS)
    service = vllm.service_url(NS, NAME, 8000)
    router = vllm.service_url(OPERATOR_NS, "llmop-router", 8080, "")
    client = openai.OpenAI(base_url=service, api_key="unused", timeout=300, max_retries=0)
    seen: list[dict[str, int]] = []
    seen_enough = threading.Event()

    def load() -> None:
        """One long request, streamed so that it can stop once the test has seen enough:
        closing the stream aborts it in vLLM, so the queue does not outlive the test."""
        with client.completions.create(model=GEMMA_VLLM_ID, prompt=QUESTION, max_tokens=96,
                                       temperature=0, stream=True,
                                       extra_body={"ignore_eos": True}) as stream:
            for _ in stream:
                if seen_enough.is_set():
                    return

    with ThreadPoolExecutor(12) as pool:
        loads = [pool.submit(load) for _ in range(12)]
        deadline = time.monotonic() + 120
        replicas = 1
        # until the scale-up and the queue seen here too: the autoscaler may act on a read
        # of the queue between two of the test's, and the queue lasts as long as the load
        while (replicas < 2 or not any(s["waiting"] >= 2 for s in seen)) \
                and time.monotonic() < deadline:
            scale = httpx2.get(f"{router}/scale/{NS}/{NAME}", timeout=10)
            if scale.is_success:
                seen.append(scale.json())
            replicas = vllm.json("-n", NS, "get", "deployment", NAME)["spec"]["replicas"]
            time.sleep(0.5)  # the autoscaler's own interval; nothing to wait on from outside
        seen_enough.set()
    for done in loads:
        done.result()  # no request failed: each was stopped by the test or finished
    assert replicas == 2, seen
    assert any(s["waiting"] >= 2 and s["pending"] == 0 for s in seen), seen
    events = vllm.json("-n", NS, "get", "events", "--field-selector",
                       f"involvedObject.name={NAME}")["items"]
    assert any("request(s) for 1 replica(s)" in e.get("message", "") for e in events), [
        e.get("message") for e in events]


def test_the_compiled_graphs_stay_on_the_node_for_the_next_pod(vllm: NodeCluster) -> None:
    """settings.compileCache (the install's): vLLM's cache is the node's directory."""
    for pod in vllm.json("-n", NS, "get", "pods", "-l", f"app={NAME}")["items"]:
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert volumes["compile-cache"]["hostPath"]["path"] == str(COMPILE_CACHE / NS)
    # on CPU (AOT compile off) inductor's FX graphs and kernels are vLLM's compile cache
    graphs = COMPILE_CACHE / NS / "inductor" / "fxgraph"
    assert any(p.is_file() for p in graphs.rglob("*")), sorted(graphs.parent.iterdir())
