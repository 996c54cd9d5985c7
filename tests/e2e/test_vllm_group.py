"""On the real node: one vLLM replica across two pods, pipeline parallel over vLLM's own backend.

examples/cluster/gemma-270m-vllm-2-nodes.yaml, applied as its header says. The operator
renders a LeaderWorkerSet; the LeaderWorkerSet controller's part is played by the test
(tests/e2e/lws_standin.py: the group's headless Service, its two pods with the environment
the controller gives them, its status). The pods run the rendered commands unchanged: the
leader vLLM's API server with node rank 0, the worker `vllm serve --headless` with its rank,
finding the leader by the DNS name LWS_LEADER_ADDRESS holds (the node's DNS answers a
headless Service's pods as CoreDNS does). One node holds both pods: each has its own network
namespace and address, so the group's traffic crosses pod networking as across nodes.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from e2e_cluster import MODELS_NS, NodeCluster
from lws_standin import create_group, mark_ready

from prompts import assert_vllm_chat_reaches_the_model

from samples import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.late]
GROUP = REPO / "examples" / "cluster" / "gemma-270m-vllm-2-nodes.yaml"
NS, NAME, MODEL_ID = MODELS_NS, "gemma-270m-vllm-2-nodes", "gemma-3-270m-vllm-pp2"
QUESTION = "Q: What is the capital of France?\nA:"
# two cold starts, each compiling its pipeline stage on 0.8 of a core: 324 s on an idle
# 2-core machine, more under load (settings.yaml's startup timeout allows 900)
READY_SECONDS = 600


@pytest.fixture(scope="module")
def group(kube_node: NodeCluster) -> Iterator[list[str]]:
    """The two-pod example Ready: the pods' names, leader first (deleted afterwards with
    the model: the LeaderWorkerSet owns them)."""
    kube_node.wait_for_images()
    kube_node.namespace(NS)
    with kube_node.own_models():
        kube_node.kubectl("apply", "-f", str(GROUP))
        pods = create_group(kube_node, NS, NAME)
        mark_ready(kube_node, NS, NAME, pods, READY_SECONDS)
        kube_node.wait_phase(NS, NAME, "Ready", 60)
        yield pods


def test_the_group_answers_through_the_models_service_with_the_openai_sdk(
        kube_node: NodeCluster, group: list[str]) -> None:
    client = openai.OpenAI(base_url=kube_node.service_url(NS, NAME, 8000), api_key="unused",
                           timeout=60)
    answer = client.completions.create(model=MODEL_ID, prompt=QUESTION, max_tokens=16,
                                       stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    # vLLM names its parallel shape in the fingerprint: two pipeline stages served it
    assert "-pp2-" in (answer.system_fingerprint or ""), answer.system_fingerprint
    # the Service reaches the leader only (the worker serves no HTTP)
    slices = kube_node.json("-n", NS, "get", "endpointslices", "-l",
                            f"kubernetes.io/service-name={NAME}")["items"]
    targets = {e["targetRef"]["name"] for s in slices for e in s.get("endpoints") or []}
    assert targets == {group[0]}
    # and a chat request reaches both stages as the conversation, in the weights' template
    assert_vllm_chat_reaches_the_model(kube_node.service_url(NS, NAME, 8000, ""), MODEL_ID)


def test_each_pod_runs_its_own_stage_from_the_rendered_command(
        kube_node: NodeCluster, group: list[str]) -> None:
    leader, worker = (kube_node.json("-n", NS, "get", "pod", p) for p in group)
    assert worker["spec"]["containers"][0]["command"] == ["vllm", "serve"]
    for pod in (leader, worker):
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    log = kube_node.kubectl("-n", NS, "logs", group[1])
    assert "PP rank 1" in log, log[-3000:]
    assert leader["status"]["podIP"] != worker["status"]["podIP"]
