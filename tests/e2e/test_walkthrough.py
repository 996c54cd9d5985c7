"""The guide's deployment walkthrough (chapter 12), the steps that fit on a CPU node.

Its own commands, on the small model: steps 1-2 are the session's install (namespaces, CRD,
RBAC, settings and the manager, as `kubectl apply -k`; docs/deviations.md says why not file
by file), step 3 applies the CPU example and the guide's remote and GPU samples with their
Secrets, step 4 the MCP server, step 5 watches the models come online and reads the engine's
log by the guide's label, step 6 port-forwards the model's Service and curls a chat
completion, step 7 port-forwards the MCP server and curls its tools, step 8 runs the
registry query tool. Nothing calls the remote providers: there is no network to them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_cluster import GEMMA_ID, GEMMA_NAME, MODELS_NS, NodeCluster, kubectl_watch

from controlplane import free_port, kubectl_path
from samples import REPO

pytestmark = pytest.mark.e2e
NS = MODELS_NS
REMOTE_SAMPLES = {"gpt55-remote": "openai-api-key", "claude-opus47-remote": "anthropic-api-key",
                  "gemini31-remote": "google-api-key"}
GPU_SAMPLES = ("gemma4-26b-amd", "qwen36-35b-gaudi", "gemma4-31b-nvidia")


@contextlib.contextmanager
def port_forward(cluster: NodeCluster, target: str, port: int) -> Iterator[int]:
    """`kubectl port-forward -n ai-models TARGET LOCAL:PORT &`, until it forwards."""
    local = free_port()
    proc = subprocess.Popen(
        [kubectl_path(), f"--kubeconfig={cluster.plane.kubeconfig}", "port-forward", "-n", NS,
         target, f"{local}:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # "Forwarding from 127.0.0.1:LOCAL -> PORT"
        assert line.startswith("Forwarding from"), line
        yield local
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def curl(url: str, body: dict[str, Any], *headers: str) -> Any:
    """The guide's curl, JSON body in, JSON answer out."""
    argv = ["curl", "-sS", "--max-time", "60", "-X", "POST", url,
            "-H", "Content-Type: application/json", *(a for h in headers for a in ("-H", h)),
            "-d", json.dumps(body)]
    return json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)


@pytest.fixture(scope="module")
def walked(kube_node: NodeCluster) -> Iterator[NodeCluster]:
    """Steps 1 to 4, as the guide runs them, on a namespace no other module's model holds."""
    kube_node.namespace(NS)
    with kube_node.own_models():
        yield _steps_1_to_4(kube_node)


def _steps_1_to_4(kube_node: NodeCluster) -> NodeCluster:
    for secret, literal in (("hf-token", "token=YOUR_HF_TOKEN"),
                            *((s, "apiKey=YOUR_API_KEY") for s in REMOTE_SAMPLES.values())):
        kube_node.kubectl("create", "secret", "generic", secret, "--namespace", NS,
                          f"--from-literal={literal}", check=False)  # kept from another test
    kube_node.kubectl("apply", "-f", str(REPO / "examples" / "cluster" / "gemma-270m.yaml"))
    for sample in (*REMOTE_SAMPLES, *GPU_SAMPLES):
        kube_node.kubectl("apply", "-f", str(REPO / "config" / "samples" / f"{sample}.yaml"))
    kube_node.apply_kustomization(REPO / "tests" / "e2e" / "mcp", ["mcp-server"], NS)
    return kube_node


def test_step5_the_models_come_online(walked: NodeCluster) -> None:
    expected = {GEMMA_NAME: "Ready", **dict.fromkeys(REMOTE_SAMPLES, "Proxying"),
                **dict.fromkeys(GPU_SAMPLES, "WaitingForGPU")}
    columns = "custom-columns=NAME:.metadata.name,STATUS:.status.phase"
    with kubectl_watch(walked.plane, "get", "llmmodels", "-n", NS, "-w", "--no-headers",
                       "-o", columns) as watch:
        def online(lines: list[str]) -> bool:
            last = {}
            for line in lines:
                name, _, phase = line.partition(" ")
                last[name] = phase.strip()
            return all(last.get(n) == p for n, p in expected.items())
        watch.until(online, 180)
    logs = walked.kubectl("logs", "-n", NS, "-l", f"ai.example.io/model-name={GEMMA_NAME}",
                          "-c", "inference-server", "--tail=-1")
    assert "server is listening" in logs or "listening on" in logs, logs[-2000:]


def test_step6_the_model_answers_through_port_forward(walked: NodeCluster) -> None:
    walked.wait_phase(NS, GEMMA_NAME, "Ready")
    with port_forward(walked, f"svc/{GEMMA_NAME}", 8000) as local:
        answer = curl(f"http://localhost:{local}/v1/chat/completions", {
            "model": GEMMA_ID, "messages": [{"role": "user", "content": "What is 2+2?"}],
            "max_tokens": 50})
    assert answer["model"] == GEMMA_ID
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_step7_the_mcp_server_lists_and_describes_the_models(walked: NodeCluster) -> None:
    walked.wait_phase(NS, GEMMA_NAME, "Ready")
    with port_forward(walked, "svc/mcp-server", 3000) as local:  # the guide's curls, as is
        url = f"http://localhost:{local}/mcp"
        listed = curl(url, {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                            "params": {}})
        described = curl(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "list_available_models", "arguments": {}}})
    tools = {t["name"] for t in listed["result"]["tools"]}
    assert {"gemma3_270m", "list_available_models"} <= tools
    text = json.dumps(described["result"])
    assert GEMMA_ID in text


def test_step8_the_registry_query_tool(walked: NodeCluster) -> None:
    walked.wait_phase(NS, GEMMA_NAME, "Ready")
    result = subprocess.run([sys.executable, str(REPO / "tools" / "query_models.py")],
                            capture_output=True, text=True, timeout=60, check=False,
                            env={**os.environ, "KUBECONFIG": str(walked.plane.kubeconfig)})
    assert result.returncode == 0, result.stderr
    # the guide's queries: its reasoning, AMD and remote models; only the remote ones serve
    assert "Found 0 AMD models" in result.stdout
    for remote in REMOTE_SAMPLES:
        assert f"{remote} " in result.stdout and "Proxying" in result.stdout
