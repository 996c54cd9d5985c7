"""On the real node: the operator installed as shipped serves Gemma 3 270M from its example.

What a user sees, in order: `kubectl apply -k` brings up the operator (one leader); the
example becomes a pod whose init containers check the GGUF file for real; status turns
Ready from the real pod; the model answers through its Service (OpenAI SDK) and through the
endpoint its status advertises, from inside the cluster; faults under steady load; and a
deleted model leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import openai
import pytest
import yaml
from e2e_cluster import (
    GEMMA,
    GEMMA_ID,
    GEMMA_NAME,
    GEMMA_SHA256,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    kubectl_watch,
)
from load import SteadyLoad
from prometheus_client.parser import text_string_to_metric_families

from prompts import assert_chat_reaches_the_model

pytestmark = pytest.mark.e2e
NS, NAME, MODEL_ID = MODELS_NS, GEMMA_NAME, GEMMA_ID
OPERATOR_SA = f"system:serviceaccount:{OPERATOR_NS}:llm-operator"


def test_the_operator_installs_as_shipped_with_one_leader(kube_node: NodeCluster) -> None:
    deployment = kube_node.json("-n", OPERATOR_NS, "get", "deployment", "llm-operator")
    assert deployment["status"]["readyReplicas"] == 2
    pods = kube_node.json("-n", OPERATOR_NS, "get", "pods")["items"]
    lease = kube_node.json("-n", OPERATOR_NS, "get", "lease", "llm-operator")
    assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in pods}
    for pod in pods:  # what the Dockerfile promises, on the image built without Docker
        (container,) = pod["spec"]["containers"]
        assert container["image"] == "llmop.local/llm-operator:dev"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532
        assert all(s["ready"] and s["restartCount"] == 0
                   for s in pod["status"]["containerStatuses"])


def test_the_example_is_checked_then_served_and_ready_from_its_real_pod(
        gemma: NodeCluster) -> None:
    model = gemma.json("-n", NS, "get", "llmmodel", NAME)
    status = model["status"]
    assert status["model"]["sha256"] == GEMMA_SHA256  # model-verify read it from the file
    assert status["model"]["architecture"] == "gemma3"
    assert status["currentReplicas"] == 1
    assert status["endpoint"] == f"http://{NAME}.{NS}.svc.cluster.local:8000/v1"
    found = gemma.kubectl("get", "llmmodels", "-A", "-o", "name", "-l",  # the guide's query
                          "ai.example.io/domain-general=true,ai.example.io/vram-tier=cpu,"
                          "ai.example.io/deployment-mode=local")
    assert f"llmmodel.ai.example.io/{NAME}" in found.split()
    (pod,) = gemma.json("-n", NS, "get", "pods", "-l", f"app={NAME}")["items"]
    init = {s["name"]: s["state"]["terminated"] for s in pod["status"]["initContainerStatuses"]}
    assert set(init) == {"model-verify", "model-prepare"}  # nothing to download: a node file
    assert all(t["exitCode"] == 0 for t in init.values())
    assert json.loads(init["model-verify"]["message"])["sha256"] == GEMMA_SHA256


def test_a_completion_through_the_service_with_the_openai_sdk(gemma: NodeCluster) -> None:
    client = openai.OpenAI(base_url=gemma.service_url(NS, NAME, 8000), api_key="unused", timeout=60)
    answer = client.completions.create(model=MODEL_ID, prompt="Q: What is the capital of "
                                       "France?\nA:", max_tokens=16, stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    assert [m.id for m in client.models.list()] == [MODEL_ID]


def test_a_chat_request_reaches_the_model_as_the_conversation(gemma: NodeCluster) -> None:
    """chat-template: gemma is applied (--no-jinja): the question, in Gemma's turns."""
    engine = gemma.service_url(NS, NAME, 8000, "")
    assert_chat_reaches_the_model(engine, f"{engine}/v1", MODEL_ID)


def test_the_engine_keeps_a_conversations_prompt_in_its_counted_host_tier(
        gemma: NodeCluster) -> None:
    """The default host KV tier: --cache-ram 256 in the pod, 1Gi + 256Mi in its memory
    request, in status; on one slot, a conversation's prompt comes back from host memory
    after another took the slot (the engine's own counter, read between the turns)."""
    (pod,) = gemma.json("-n", NS, "get", "pods", "-l", f"app={NAME}")["items"]
    (engine,) = pod["spec"]["containers"]
    args = engine["args"]
    assert args[args.index("--cache-ram") + 1] == "256"
    assert engine["resources"]["requests"]["memory"] == "1280Mi"
    assert engine["resources"]["limits"]["memory"] == "1280Mi"
    assert gemma.json("-n", NS, "get", "llmmodel", NAME)["status"]["hostKvCache"] == "256Mi"
    base = gemma.service_url(NS, NAME, 8000, "")
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", timeout=60)

    def cached_total() -> float:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
                   if s.name == "llamacpp:prompt_tokens_cached_total")

    openings = [f"Notes on the {t}: " + " ".join([t] * 120) + "\nQ: And then?\nA:"
                for t in ("harbor", "orchard")]
    for prompt in openings:  # A, then B takes the one slot
        client.completions.create(model=MODEL_ID, prompt=prompt, max_tokens=1)
    before = cached_total()
    again = client.completions.create(model=MODEL_ID, prompt=openings[0], max_tokens=1)
    details = again.usage.prompt_tokens_details if again.usage else None
    assert details is not None and (details.cached_tokens or 0) > 100
    assert cached_total() - before > 100


def test_the_endpoint_in_status_answers_inside_the_cluster(gemma: NodeCluster) -> None:
    """Cluster DNS, the Service and the pod, from a pod: what another workload would use."""
    endpoint = gemma.json("-n", NS, "get", "llmmodel", NAME)["status"]["endpoint"]
    script = (
        "import json, sys, urllib.request\n"
        "body = json.dumps({'model': sys.argv[2], 'prompt': 'Q: 2+2?\\nA:', "
        "'max_tokens': 4}).encode()\n"
        "request = urllib.request.Request(sys.argv[1] + '/completions', data=body, "
        "headers={'Content-Type': 'application/json'})\n"
        "print(json.load(urllib.request.urlopen(request, timeout=60))['model'])\n")
    out = gemma.kubectl("-n", OPERATOR_NS, "exec", "deployment/llm-operator", "--",
                        "python3", "-c", script, endpoint, MODEL_ID)
    assert out.strip() == MODEL_ID


async def test_changing_the_args_rolls_out_with_no_failed_request(gemma: NodeCluster) -> None:
    load = SteadyLoad(gemma.service_url(NS, NAME, 8000), MODEL_ID, clients=3)
    async with load.running():
        while len(load.outcomes) < 3:  # serving before the change
            await asyncio.sleep(0.1)
        await gemma.plane.akubectl("-n", NS, "patch", "llmmodel", NAME, "--type=merge", "-p",
                                   json.dumps({"spec": {"engineArgs": {
                                       "ctx-size": "2048", "chat-template": "gemma",
                                       "temp": "0.5"}}}))
        await gemma.plane.akubectl("-n", NS, "rollout", "status", f"deployment/{NAME}",
                                   "--timeout=120s", timeout=150)
        await asyncio.to_thread(gemma.wait_phase, NS, NAME, "Ready")
        done = len(load.outcomes)
        while len(load.outcomes) < done + 3:  # and serving after it, from the new pod
            await asyncio.sleep(0.1)
    assert load.failures == [], load.summary()
    args = gemma.json("-n", NS, "get", "deployment", NAME)["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert args[args.index("--temp") + 1] == "0.5"


async def test_a_deleted_engine_pod_degrades_the_model_then_it_recovers(
        gemma: NodeCluster) -> None:
    load = SteadyLoad(gemma.service_url(NS, NAME, 8000), MODEL_ID, clients=3)
    with kubectl_watch(gemma.plane, "-n", NS, "get", f"llmmodel/{NAME}", "--watch",
                       "-o", "jsonpath={.status.phase}{'\\n'}") as phases:
        async with load.running():
            while len(load.outcomes) < 3:
                await asyncio.sleep(0.1)
            deleted = time.monotonic()
            await gemma.plane.akubectl("-n", NS, "delete", "pod", "-l", f"app={NAME}",
                                       "--wait=false")
            await asyncio.to_thread(phases.until, lambda seen: "Ready" in seen[
                next((i for i, p in enumerate(seen) if p != "Ready"), len(seen)):], 120)
            back = time.monotonic()
            recovered = len(load.outcomes)
            while len(load.outcomes) < recovered + 6:
                await asyncio.sleep(0.1)
    seen = phases.lines
    # it left Ready while no replica served: the replacement pod was Pending (unscheduled),
    # Starting or failing, whichever the reconciles caught (with the startup probe every
    # second, a replacement can go from unscheduled to Ready between two of them)
    assert seen[0] == "Ready" and set(seen[1:-1]) & {"Degraded", "Starting", "Pending"}, seen
    timeline = ([(o.result, round(o.sent - deleted, 1), round(o.ended - deleted, 1))
                 for o in load.failures], round(back - deleted, 1))  # s after the delete
    # clients saw clear errors while no replica served, and nothing stuck afterwards. One
    # request in ~250, sent before the model was back, once hung until the client's 30 s
    # timeout in CI (not reproduced in 4 runs here): a request that meets the old pod as it
    # goes may get no answer at all; it counts as an error of that window, never later.
    assert {o.result for o in load.failures} <= {
        "ClientConnectorError", "ServerDisconnectedError", "ClientOSError",
        "TimeoutError"}, (load.summary(), timeline)
    assert all(o.sent < back for o in load.failures if o.result == "TimeoutError"), timeline
    # what ends after the model is back is judged by when it was sent: one sent while no
    # replica served may end late, however it failed (the check that allowed only a late
    # timeout failed once on a loaded 2-core machine; the offenders are named now)
    late = [(o.result, round(o.sent - deleted, 1), round(o.ended - deleted, 1))
            for o in load.outcomes[recovered + 3:] if o.result != "ok" and o.sent >= back]
    assert late == [], (load.summary(), late, round(back - deleted, 1))


async def test_a_new_leader_takes_over_and_writes_only_what_changed(gemma: NodeCluster) -> None:
    """The leader's pod deleted under load: serving goes on (the operator is not in the
    data path), the standby takes the Lease, and writes nothing until something changes."""
    plane = gemma.plane
    leader = gemma.json("-n", OPERATOR_NS, "get", "lease", "llm-operator")["spec"][
        "holderIdentity"]
    mark = plane.audit_mark()
    load = SteadyLoad(gemma.service_url(NS, NAME, 8000), MODEL_ID, clients=2)
    with kubectl_watch(plane, "-n", OPERATOR_NS, "get", "lease/llm-operator", "--watch",
                       "-o", "jsonpath={.spec.holderIdentity}{'\\n'}") as holders:
        async with load.running():
            await plane.akubectl("-n", OPERATOR_NS, "delete", "pod", leader, "--wait=false")
            seen = await asyncio.to_thread(holders.until, lambda lines: any(
                h and h != leader for h in lines), 60)
            finished = len(load.outcomes)
            while len(load.outcomes) < finished + 4:
                await asyncio.sleep(0.1)
    new_leader = next(h for h in seen if h and h != leader)
    assert load.failures == [], load.summary()
    # drift after the takeover is repaired by the new leader, and that is all it wrote
    gemma.kubectl("-n", NS, "delete", "service", NAME)
    gemma.kubectl("-n", NS, "wait", "--for=create", f"service/{NAME}", "--timeout=60s")
    writes = [f"{e['verb']} {e['objectRef'].get('resource')}/{e['objectRef'].get('name', '')}"
              for e in plane.requests(since=mark, user=OPERATOR_SA)
              if e["verb"] in {"create", "update", "patch", "delete"}
              and e["objectRef"].get("name") == NAME]  # this model and its children
    assert writes == [f"patch services/{NAME}"], (new_leader, writes)


def test_a_file_with_the_wrong_sha256_fails_the_model_with_the_reason(
        gemma: NodeCluster) -> None:
    doc = yaml.safe_load(GEMMA.read_text())
    doc["metadata"]["name"] = "gemma-tampered"
    doc["spec"]["modelSource"]["sha256"] = "0" * 64
    gemma.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    gemma.wait_phase(NS, "gemma-tampered", "Failed")
    model = gemma.json("-n", NS, "get", "llmmodel", "gemma-tampered")
    ready = next(c for c in model["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert "ChecksumMismatch" in json.dumps(model["status"]), model["status"]
    (pod,) = gemma.json("-n", NS, "get", "pods", "-l", "app=gemma-tampered")["items"]
    server = pod["status"]["containerStatuses"][0]
    assert "running" not in server["state"]  # never served
    # kubelet retries the check; the read-only node file is not hashed again (the digest
    # is noted in the pod's cache volume), and the status says so
    with kubectl_watch(gemma.plane, "-n", NS, "get", "llmmodel/gemma-tampered", "--watch",
                       "-o", "jsonpath={.status.conditions}{'\\n'}") as conditions:
        conditions.until(lambda lines: any("hashed once" in line for line in lines), 120)
    gemma.kubectl("-n", NS, "delete", "llmmodel", "gemma-tampered", "--wait=true",
                  "--timeout=60s")


def test_a_deleted_model_leaves_nothing_behind(gemma: NodeCluster) -> None:
    selector = f"app.kubernetes.io/instance={NAME}"
    kinds = "deployments,replicasets,pods,services,configmaps,persistentvolumeclaims"
    assert gemma.kubectl("-n", NS, "get", kinds, "-l", selector, "-o", "name").strip()
    gemma.kubectl("-n", NS, "delete", "-f", str(GEMMA), "--wait=true", "--timeout=60s")
    gemma.kubectl("-n", NS, "wait", "--for=delete", "pods", "-l", f"app={NAME}",
                  "--timeout=90s")
    assert gemma.kubectl("-n", NS, "get", kinds, "-l", selector, "-o", "name").strip() == ""
