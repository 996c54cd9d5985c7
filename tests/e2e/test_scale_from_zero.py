"""On the real node, which has no KEDA: the operator's built-in autoscaler scales a model.

A copy of the Gemma example at `minReplicas: 0`, `maxReplicas: 2`, 4 requests per replica,
20 s of idle time, behind the router (tests/e2e/router); the operator's settings shorten
the stabilization window to 15 s (tests/e2e/install/settings.yaml). Clients go through the
router's Service with the OpenAI SDK and aiohttp, as users would; replicas are read from the
Deployment, reasons from the model's Events.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Iterator

import openai
import pytest
import yaml
from e2e_cluster import GEMMA, MODELS_NS, OPERATOR_NS, NodeCluster, kubectl_watch
from load import SteadyLoad
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.e2e
NS, NAME, MODEL_ID = MODELS_NS, "gemma-auto", "gemma-3-270m-auto"
OPERATOR_SA = f"system:serviceaccount:{OPERATOR_NS}:llm-operator"
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def autoscaled(routed: NodeCluster) -> Iterator[NodeCluster]:
    """The Gemma example as an autoscaled model at minReplicas 0; deleted afterwards."""
    doc = yaml.safe_load(GEMMA.read_text())
    doc["metadata"]["name"] = NAME
    doc["spec"].update({
        "modelId": MODEL_ID,
        "scaling": {"minReplicas": 0, "maxReplicas": 2, "scaleUpThreshold": 4,
                    "cooldownPeriodSeconds": 20},
        "mcpExposure": {"enabled": False}})
    doc["spec"]["resources"]["cpuMillicores"] = 250  # two of them beside the example
    routed.kubectl("apply", "-f", "-", stdin=json.dumps(doc))
    routed.kubectl("-n", NS, "wait", "--for=create", f"deployment/{NAME}", "--timeout=60s")
    yield routed
    routed.kubectl("-n", NS, "delete", "llmmodel", NAME, "--timeout=120s")


def wait_replicas(cluster: NodeCluster, n: int, timeout: int = 120) -> None:
    """Until the Deployment asks for ``n`` replicas (kubectl wait: a watch)."""
    cluster.kubectl("-n", NS, "wait", f"deployment/{NAME}", f"--timeout={timeout}s",
                    f"--for=jsonpath={{.spec.replicas}}={n}")


def scaled(cluster: NodeCluster) -> list[str]:
    """The model's "Scaled" Events, oldest first, as "from -> to replica(s) (reason)"."""
    events = cluster.json("-n", NS, "get", "events", "--field-selector",
                          f"reason=Scaled,involvedObject.name={NAME}")["items"]
    events.sort(key=lambda e: int(e["metadata"]["resourceVersion"]))
    return [e["message"].split(":")[0] for e in events]


def leader_looks(cluster: NodeCluster, leader: str) -> float:
    """How often the leader's built-in autoscaler has looked (its /metrics, by pod IP)."""
    ip = cluster.kubectl("-n", OPERATOR_NS, "get", "pod", leader, "-o",
                         "jsonpath={.status.podIP}")
    with urllib.request.urlopen(f"http://{ip}:8081/metrics", timeout=5) as r:
        text = r.read().decode()
    return next((s.value for f in text_string_to_metric_families(text)
                 for s in f.samples if s.name == "llmop_operator_autoscaler_looks_total"), 0.0)


async def test_a_model_at_zero_answers_a_plain_and_a_streamed_request(
        autoscaled: NodeCluster) -> None:
    """Sent while no replica runs: the router holds both, the first wakes the model."""
    wait_replicas(autoscaled, 0)  # created at 1; idle for 20 s -> 0
    autoscaled.wait_phase(NS, NAME, "Idle")
    async with openai.AsyncOpenAI(base_url=autoscaled.service_url(
            OPERATOR_NS, "llmop-router", 8080), api_key="unused", timeout=180) as client:
        sent = time.monotonic()

        async def streamed() -> tuple[str, float]:
            stream = await client.chat.completions.create(
                model=MODEL_ID, messages=QUESTION, max_tokens=16, temperature=0, stream=True)
            text, first = "", 0.0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    first = first or time.monotonic() - sent
                    text += chunk.choices[0].delta.content
            return text, first

        plain, (text, first_token) = await asyncio.gather(
            client.chat.completions.create(model=MODEL_ID, messages=QUESTION, max_tokens=16,
                                           temperature=0),
            streamed())
    # both answered in full (a tiny base model batching two requests may not say "Paris")
    assert plain.choices[0].finish_reason in {"stop", "length"}
    assert plain.choices[0].message.content and text
    pod = autoscaled.json("-n", NS, "get", "pods", "-l",
                          f"ai.example.io/model-name={NAME}")["items"][0]
    print(f"first streamed token {first_token:.1f} s after sending at zero replicas; "
          f"pod created {pod['metadata']['creationTimestamp']}")
    _until_scaled(autoscaled, ["0 -> 1 replica(s) (FirstRequest)"])


async def test_load_scales_to_max_and_a_new_leader_changes_nothing_by_itself(
        autoscaled: NodeCluster) -> None:
    """8 clients -> 2 replicas; the leader replaced; back to 1 after the window, 0 idle."""
    plane = autoscaled.plane
    router = autoscaled.service_url(OPERATOR_NS, "llmop-router", 8080)
    load = SteadyLoad(router, MODEL_ID, clients=8, max_tokens=32, timeout=120)
    # The clients hang up once 2 replicas are asked for: waiting for their queued answers
    # (tens of seconds on 250m CPU each) ate the 15 s window before the leader was replaced.
    async with load.running(hang_up=True):
        await asyncio.to_thread(wait_replicas, autoscaled, 2)
    assert load.failures == [], load.summary()
    leader = autoscaled.json("-n", OPERATOR_NS, "get", "lease", "llm-operator")["spec"][
        "holderIdentity"]
    with kubectl_watch(plane, "-n", OPERATOR_NS, "get", "lease/llm-operator", "--watch",
                       "-o", "jsonpath={.spec.holderIdentity}{'\\n'}") as holders:
        await plane.akubectl("-n", OPERATOR_NS, "delete", "pod", leader)
        mark = plane.audit_mark()
        seen = await asyncio.to_thread(holders.until, lambda lines: any(
            h and h != leader for h in lines), 60)
    new_leader = next(h for h in seen if h and h != leader)
    await asyncio.to_thread(_until_looks, autoscaled, new_leader, 5)
    writes = [e for e in plane.requests(since=mark, user=OPERATOR_SA)
              if e["objectRef"].get("subresource") == "scale"]
    assert writes == []  # five looks without load: the window still holds 2
    assert autoscaled.json("-n", NS, "get", "deployment", NAME)["spec"]["replicas"] == 2
    wait_replicas(autoscaled, 1)
    wait_replicas(autoscaled, 0)
    _until_scaled(autoscaled, ["1 -> 2 replica(s) (Load)", "2 -> 1 replica(s) (LoadFell)",
                               "1 -> 0 replica(s) (Idle)"])


def _until_scaled(cluster: NodeCluster, last: list[str], timeout: float = 30) -> None:
    """Until the model's latest "Scaled" Events are ``last`` (each follows its write)."""
    deadline = time.monotonic() + timeout
    while (seen := scaled(cluster))[-len(last):] != last:
        if time.monotonic() > deadline:
            raise AssertionError(f"the latest Scaled events are {seen[-len(last):]}, "
                                 f"not {last}")
        time.sleep(0.2)  # Events are listed, not watched: nothing to wait on


def _until_looks(cluster: NodeCluster, leader: str, n: float, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while leader_looks(cluster, leader) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{leader} looked fewer than {n} times in {timeout} s")
        time.sleep(0.5)  # a counter in another process: nothing to wait on
