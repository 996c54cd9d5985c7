"""On the real node: the ways in beside the Service, each as its Deployment in config/.

The router (config/router) routes the Gemma example by its model id; the MCP server
(config/mcp) publishes it as a tool that the official MCP client calls; a remote model's
gateway Deployment proxies to a fake provider that runs as a pod and accepts only the key in
the Secret the model names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from e2e_cluster import GEMMA_ID, MODELS_NS, OPERATOR_NS, NodeCluster

from samples import REPO

pytestmark = pytest.mark.e2e
E2E = REPO / "tests" / "e2e"
NS = MODELS_NS
PROVIDER_KEY = "sk-e2e-provider-key-7f3a"
REMOTE = {
    "apiVersion": "ai.example.io/v1alpha1", "kind": "LLMModel",
    "metadata": {"name": "fake-remote", "namespace": NS},
    "spec": {"modelId": "fake-gpt", "deploymentMode": "remote", "contextWindowK": 128,
             "domains": ["general"],
             "remoteApi": {"baseUrl": f"http://fake-provider.{NS}.svc.cluster.local:8080/v1",
                           "apiKeySecret": "openai-api-key", "rateLimitRpm": 600},
             "mcpExposure": {"enabled": True, "toolName": "fake_remote",
                             "toolDescription": "A fake provider in the test cluster."}},
}


@pytest.fixture(scope="module")
def remote(routed: NodeCluster) -> Iterator[NodeCluster]:
    """A remote model whose provider is a pod, and its key a Secret; all of it gone after
    the module: a provider left running was preempted by the vLLM group's second pod,
    which waited for it."""
    routed.kubectl("-n", NS, "create", "secret", "generic", "openai-api-key",
                   f"--from-literal=apiKey={PROVIDER_KEY}")
    routed.apply_kustomization(E2E / "upstream", ["fake-provider"], NS)
    routed.kubectl("apply", "-f", "-", stdin=json.dumps(REMOTE))
    routed.wait_phase(NS, "fake-remote", "Proxying")
    routed.kubectl("-n", NS, "rollout", "status", "deployment/fake-remote", "--timeout=120s")
    yield routed
    routed.clear_models("fake-remote")
    routed.kubectl("delete", "-k", str(E2E / "upstream"), "--wait=true", "--timeout=60s")
    routed.kubectl("-n", NS, "delete", "secret", "openai-api-key")


def test_the_router_answers_for_the_model_by_its_id(routed: NodeCluster) -> None:
    client = openai.OpenAI(base_url=routed.service_url(OPERATOR_NS, "llmop-router", 8080),
                           api_key="unused", timeout=60)
    answer = client.completions.create(model=GEMMA_ID, prompt="Q: What is the capital of "
                                       "France?\nA:", max_tokens=16, stop=["\n"], temperature=0)
    assert "Paris" in answer.choices[0].text
    assert GEMMA_ID in [m.id for m in client.models.list()]


async def test_the_mcp_server_calls_the_model_as_a_tool(routed: NodeCluster) -> None:
    assert "Paris" in await routed.ask_tool("gemma3_270m", "What is the capital of France?")


def test_a_remote_model_reaches_its_provider_with_the_secrets_key(remote: NodeCluster) -> None:
    gateway = openai.OpenAI(base_url=remote.service_url(NS, "fake-remote", 8000),
                            api_key="unused", timeout=30)
    answer = gateway.chat.completions.create(
        model="fake-gpt", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content is not None
    assert answer.choices[0].message.content.startswith(f"key ...{PROVIDER_KEY[-4:]}")
    router = openai.OpenAI(base_url=remote.service_url(OPERATOR_NS, "llmop-router", 8080),
                           api_key="unused", timeout=30)
    through_router = router.chat.completions.create(
        model="fake-gpt", messages=[{"role": "user", "content": "hi"}])
    assert through_router.choices[0].message.content is not None
    assert "key ..." in through_router.choices[0].message.content
    # the key is in no log, status or event of the operator or the gateway
    logs = remote.kubectl("-n", NS, "logs", "deployment/fake-remote", "--all-containers")
    logs += remote.kubectl("-n", OPERATOR_NS, "logs", "deployment/llm-operator")
    logs += remote.kubectl("get", "events", "-A", "-o", "json")
    logs += remote.kubectl("-n", NS, "get", "llmmodel", "fake-remote", "-o", "json")
    assert PROVIDER_KEY not in logs
