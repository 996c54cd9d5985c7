"""A namespace being deleted refuses every create: the operator stops writing there at once.

On the session's real API server. A ValidatingAdmissionPolicy keeps the namespace's model
from being deleted, so the namespace stays Terminating with a live model in it (as it does
while the namespace controller works through a large namespace, or waits on a finalizer).
"""

from __future__ import annotations

import asyncio
import json
import uuid

from llm_operator.kube import Kube

from apitools import API, Reconciles, create, exists, gone, operator_connection, until
from controlplane import ControlPlane
from operators import running_operator
from samples import sample_doc

OPERATOR_USER = "system:serviceaccount:llm-operator-system:llm-operator"


def _hold_models(apiserver: ControlPlane, namespace: str) -> str:
    """Refuse deleting LLMModels in ``namespace``: the policy's name (delete it to let go)."""
    name = f"hold-{namespace}"
    match = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
             "resourceRules": [{"apiGroups": ["ai.example.io"], "apiVersions": ["*"],
                                "operations": ["DELETE"], "resources": ["llmmodels"]}]}
    policy = {"apiVersion": "admissionregistration.k8s.io/v1",
              "kind": "ValidatingAdmissionPolicy", "metadata": {"name": name},
              "spec": {"failurePolicy": "Fail", "matchConstraints": match,
                       "validations": [{"expression": "false",
                                        "message": "held by the test"}]}}
    binding = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": name},
               "spec": {"policyName": name, "validationActions": ["Deny"]}}
    apiserver.kubectl("apply", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
    return name


async def test_a_namespace_being_deleted_is_not_written_to_again_and_again(
        apiserver: ControlPlane, kube: Kube) -> None:
    namespace = f"doomed-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", namespace)
    held = _hold_models(apiserver, namespace)
    doc = sample_doc("qwen35-9b-cpu")
    name = doc["metadata"]["name"]
    seen = Reconciles()
    try:
        async with running_operator(operator_connection(apiserver), namespaces=[namespace],
                                    timeout=30, resync_seconds=0.1, on_reconcile=seen):
            await create(kube, doc, namespace)
            await until(kube, "v1", "services", namespace, name, exists)
            mark = apiserver.audit_mark()
            apiserver.kubectl("delete", "namespace", namespace, "--wait=false")
            # the namespace controller deletes the Service; the model stays (held)
            await until(kube, "v1", "services", namespace, name, gone)
            left_alone = 0
            async with asyncio.timeout(30):
                while left_alone < 20:
                    key, outcome = await seen.queue.get()
                    left_alone += key[1] == name and outcome.namespace_terminating
        refused = [e for e in apiserver.requests(since=mark, user=OPERATOR_USER)
                   if (e.get("responseStatus") or {}).get("code") == 403]
        # one refused write tells the operator; 20 resyncs later it has not tried again
        assert 1 <= len(refused) <= 2, [(e["verb"], e["objectRef"]) for e in refused]
    finally:
        apiserver.kubectl("delete", "validatingadmissionpolicybinding,"
                          "validatingadmissionpolicy", held, "--ignore-not-found")
    await until(kube, API, "llmmodels", namespace, name, gone, timeout=60)
