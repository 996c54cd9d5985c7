"""The operator's traces: a span per reconcile, a child span per object it writes."""

from __future__ import annotations

import base64
import copy

from llm_operator.kube import Kube
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.tracing import Tracing

from cluster import Cluster
from operators import connect, running_operator
from otlp_receiver import receiver
from samples import sample_doc

MODELS = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"


async def test_each_reconcile_is_a_trace_whose_children_are_its_writes(
        cluster: Cluster) -> None:
    async with receiver() as collector:
        settings = Settings(tracing=Tracing(endpoint=collector.url))
        async with running_operator(connect(cluster), settings), \
                Kube(connect(cluster)) as kube:
            await kube.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "openai-api-key"},
                "data": {"apiKey": base64.b64encode(b"sk").decode()}})
            await kube.request("POST", MODELS, body=copy.deepcopy(sample_doc("gpt55-remote")))
            await cluster.until(lambda: ((cluster.get(
                "ai.example.io/v1alpha1", "llmmodels", "ai-models", "gpt55-remote") or {})
                .get("status") or {}).get("phase") is not None)  # its first reconcile ended
        # the operator stopped: what it had batched is exported
    first = next(s for s in collector.named("llmop.reconcile")
                 if s.attributes.get("llmop.applied", 0) > 0)
    assert first.service == "llmop-operator"
    assert (first.attributes["k8s.namespace.name"], first.attributes["llmop.model"]) == \
        ("ai-models", "gpt55-remote")
    writes = [s for s in collector.spans if s.parent_id == first.span_id]
    assert len(writes) == first.attributes["llmop.applied"]
    assert "apply Deployment/gpt55-remote" in [s.name for s in writes]
    deployment = next(s for s in writes if s.name == "apply Deployment/gpt55-remote")
    assert deployment.trace_id == first.trace_id
    assert deployment.attributes["llmop.apply.reason"] == "it does not exist"
