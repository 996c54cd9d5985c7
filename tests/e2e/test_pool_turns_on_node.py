"""On the real node: a llama.cpp pool whose members take turns under a swap policy.

examples/cluster/model-pool with ``maxLoaded: 1`` and ``minResidencySeconds`` on every
member: the operator renders the pool's pod with its own gateway (pool-gateway) in front
of llama-server's router. Through the router, a request for the member not loaded waits
until the loaded one has had its minimum, then the gateway unloads that one and loads its
own; never are two loaded, and no request fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx2
import openai
import pytest
import yaml
from e2e_cluster import MODELS_NS, OPERATOR_NS, NodeCluster

from samples import REPO, load_yaml

pytestmark = pytest.mark.e2e
E2E = REPO / "tests" / "e2e"
POOL = REPO / "examples" / "cluster" / "model-pool"
NS, ENGINE = MODELS_NS, "gemma-small-pool"
CHAT, QA = "gemma-3-270m-chat", "gemma-3-270m-qa"
RESIDENCY = 8  # seconds: long enough to see a request wait, short for a test
QUESTION = "Q: What is the capital of France?\nA:"


@pytest.fixture(scope="module")
def turning(kube_node: NodeCluster) -> Iterator[NodeCluster]:
    kube_node.namespace(NS)
    with kube_node.own_models():
        docs = []
        for path in sorted(POOL.glob("*.yaml")):
            doc = load_yaml(path)
            doc["spec"]["pool"].update(maxLoaded=1, minResidencySeconds=RESIDENCY)
            docs.append(doc)
        kube_node.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
        for doc in docs:
            kube_node.wait_phase(NS, doc["metadata"]["name"], "Ready", 180)
        kube_node.apply_kustomization(E2E / "router", ["llmop-router"], OPERATOR_NS)
        yield kube_node


def _loaded(engine: str) -> set[str]:
    """The members loaded, as the pool's gateway reports them (GET /models)."""
    body = httpx2.get(f"{engine}/models", timeout=10).json()
    return {m["id"] for m in body["data"] if m["status"]["value"] == "loaded"}


def test_a_member_not_loaded_waits_for_the_loaded_ones_minimum_and_none_fails(
        turning: NodeCluster) -> None:
    (pod,) = turning.json("-n", NS, "get", "pods", "-l",
                          "ai.example.io/pool=gemma-small")["items"]
    assert [c["name"] for c in pod["spec"]["containers"]] == ["pool-server", "pool-reload",
                                                                 "pool-gateway"]
    client = openai.OpenAI(base_url=turning.service_url(OPERATOR_NS, "llmop-router", 8080),
                           api_key="unused", timeout=120, max_retries=0)
    engine = turning.service_url(NS, ENGINE, 8000, "")

    def ask(model_id: str) -> float:
        began = time.monotonic()
        answer = client.completions.create(model=model_id, prompt=QUESTION, max_tokens=8,
                                           temperature=0)
        assert answer.model == model_id and answer.choices[0].text
        return time.monotonic() - began

    ask(CHAT)  # loaded at start: its minimum may have passed already
    assert _loaded(engine) == {CHAT}
    began = time.monotonic()
    ask(QA)  # CHAT unloaded for it, once CHAT has had its minimum
    assert _loaded(engine) == {QA}
    assert ask(QA) < RESIDENCY / 2  # loaded: answered at once
    ask(CHAT)  # waits for QA's minimum: QA was loaded after ``began``
    assert time.monotonic() - began >= RESIDENCY
    assert _loaded(engine) == {CHAT}
    metrics = httpx2.get(f"{engine}/metrics", timeout=10).text
    assert 'action="wake",group="pool gemma-small",outcome="ok"' in metrics
    assert 'outcome="failed"' not in metrics
