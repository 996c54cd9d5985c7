"""Reconciling LLMModels against the emulator: children, labels, status, faults, no-ops."""

from __future__ import annotations

import base64
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest

from llm_operator.kube import Kube
from llm_operator.operator.reconciler import reconcile
from llm_operator.profiles.settings import Settings

from cluster import OPERATOR_KINDS, Cluster
from operators import connect
from samples import sample_doc

MODELS = ("ai.example.io/v1alpha1", "llmmodels")


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    async def no_sleep(_: float) -> None:
        return None

    async with Kube(connect(cluster), sleep=no_sleep) as k:
        yield k


async def add_model(kube: Kube, stem: str, **spec: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sample_doc(stem))
    doc["spec"].update(spec)
    created: dict[str, Any] = await kube.request(
        "POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels", body=doc)
    return created


async def add_secret(kube: Kube, name: str, key: str) -> None:
    await kube.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
        "data": {key: base64.b64encode(b"s3cr3t").decode()}})


async def current(kube: Kube, name: str) -> dict[str, Any]:
    doc = await kube.get(*MODELS, "ai-models", name)
    assert doc is not None
    return doc


def kinds(cluster: Cluster) -> list[str]:
    out = []
    for api, plural, kind, _ in OPERATOR_KINDS:
        if plural not in {"llmmodels", "secrets", "events", "pods", "priorityclasses"}:
            out += [f"{kind}/{o['metadata']['name']}" for o in cluster.objects_of(api, plural)]
    return sorted(out)


async def test_remote_model_gets_its_gateway_and_proxies_once_ready(
        cluster: Cluster, kube: Kube) -> None:
    await add_secret(kube, "openai-api-key", "apiKey")
    doc = await add_model(kube, "gpt55-remote")
    outcome = await reconcile(kube, doc, Settings())
    assert kinds(cluster) == ["ConfigMap/gpt55-remote-proxy-config", "Deployment/gpt55-remote",
                              "NetworkPolicy/gpt55-remote-gateway",
                              "PodDisruptionBudget/gpt55-remote", "Service/gpt55-remote",
                              "ServiceMonitor/gpt55-remote"]
    assert outcome.phase == "Pending"
    deploy = cluster.get("apps/v1", "deployments", "ai-models", "gpt55-remote")
    assert deploy is not None
    assert deploy["metadata"]["ownerReferences"][0]["uid"] == doc["metadata"]["uid"]
    await kube.merge_patch("apps/v1", "deployments", "ai-models", "gpt55-remote",
                           body={"status": {"readyReplicas": 2, "replicas": 2}},
                           subresource="status")
    model = await current(kube, "gpt55-remote")
    second = await reconcile(kube, model, Settings())
    model = await current(kube, "gpt55-remote")
    assert second.phase == "Proxying"
    assert model["status"]["endpoint"] == "http://gpt55-remote.ai-models.svc.cluster.local:8000/v1"
    assert [e.reason for e in second.events] == ["Proxying"]
    events = cluster.objects_of("v1", "events", "ai-models")
    assert [e["reason"] for e in events].count("Proxying") == 1


async def test_missing_secret_fails_and_creates_nothing(cluster: Cluster, kube: Kube) -> None:
    doc = await add_model(kube, "gpt55-remote")
    outcome = await reconcile(kube, doc, Settings())
    assert outcome.phase == "Failed" and kinds(cluster) == []
    status = (await current(kube, "gpt55-remote"))["status"]
    placed = next(c for c in status["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "SecretMissing" and "openai-api-key" in placed["message"]
    assert [e["type"] for e in cluster.objects_of("v1", "events")] == ["Warning"]


def pool_member(name: str, model_id: str, **pool: Any) -> dict[str, Any]:
    doc = copy.deepcopy(sample_doc("qwen35-9b-cpu"))
    doc["metadata"]["name"] = name
    doc["spec"].update(modelId=model_id, inferenceEngine="llamacpp",
                       modelSource={"type": "file", "path": f"/var/lib/models/{name}.gguf"},
                       pool={"name": "small", "maxLoaded": 1, **pool})
    return doc


async def test_pool_members_share_one_engine_owned_by_all_of_them(cluster: Cluster,
                                                                  kube: Kube) -> None:
    """Each member's reconcile renders the same pool objects, owned by every member; each
    member's endpoint is the pool's Service and none gets a Deployment of its own."""
    made = [await kube.request("POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/"
                               "llmmodels", body=pool_member(n, f"org/{n}"))
            for n in ("one", "two")]
    for doc in made:
        outcome = await reconcile(kube, doc, Settings())
        assert outcome.recheck_after is not None  # its sibling may change the pool
    assert sorted(kinds(cluster)) == ["ConfigMap/small-pool", "Deployment/small-pool",
                                      "PodDisruptionBudget/small-pool", "Service/small-pool"]
    deployment = cluster.get("apps/v1", "deployments", "ai-models", "small-pool")
    assert deployment is not None
    owners = {o["name"] for o in deployment["metadata"]["ownerReferences"]}
    assert owners == {"one", "two"}
    server, reloader = deployment["spec"]["template"]["spec"]["containers"]
    assert server["args"][-2:] == ["--models-max", "1"] and reloader["name"] == "pool-reload"
    preset = cluster.get("v1", "configmaps", "ai-models", "small-pool")
    assert preset is not None and "[org/one]" in preset["data"]["models.ini"] \
        and "[org/two]" in preset["data"]["models.ini"]
    status = (await current(kube, "one"))["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"  # until the pool's pod is ready (tests/e2e)


WAKE_FAILED = "POST http://127.0.0.1:8002/wake_up answered 500: CUDA out of memory"


@pytest.mark.parametrize(("said", "status", "reason", "message"), [
    (("loaded", None), "True", "Loaded", "loaded in pool"),
    (("loading", None), "False", "Loading", "being loaded"),
    (("unloaded", None), "False", "NotLoaded", "its next request loads it"),
    (("sleeping", None), "False", "Asleep", "its next request wakes it"),
    (("failed", None), "False", "LoadFailed", "exited while loading it"),
    (("failed", WAKE_FAILED), "False", "LoadFailed", f"could not load it: {WAKE_FAILED}"),
    (None, "False", "Unknown", "did not say")])
async def test_a_members_loaded_condition_follows_its_pools_engine(
        cluster: Cluster, kube: Kube, said: tuple[str, str | None] | None, status: str,
        reason: str, message: str) -> None:
    base = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
    one = await kube.request("POST", base, body=pool_member("one", "org/one"))
    await kube.request("POST", base, body=pool_member("two", "org/two"))
    asked: list[str] = []

    async def engine_says(model: Any) -> tuple[str, str | None] | None:
        asked.append(model.spec.model_id)
        return said

    await reconcile(kube, one, Settings(), pool_state=engine_says)
    assert asked == ["org/one"]
    loaded = next(c for c in (await current(kube, "one"))["status"]["conditions"]
                  if c["type"] == "Loaded")
    assert (loaded["status"], loaded["reason"]) == (status, reason)
    assert message in loaded["message"]
    assert loaded["lastTransitionTime"]  # since when


async def add_pool_pod(kube: Kube, deployment: dict[str, Any], refused: dict[str, str]
                       ) -> None:
    """The pool's pod as the kubelet reports it: each init container done, or failed
    with its termination message and backing off where it is the first to get or check a
    member's file in ``refused`` (a member's name: the message)."""
    spec = deployment["spec"]["template"]["spec"]
    statuses = []
    for container in spec["initContainers"]:
        name = container["name"]
        member = container["volumeMounts"][0]["mountPath"].split("/")[2]  # /models/<member>
        if member in refused:
            refused[name] = refused.pop(member)
        ended = {"exitCode": 1 if name in refused else 0, "message": refused.get(name, ""),
                 "reason": "Error" if name in refused else "Completed"}
        statuses.append({"name": name, "image": "x", "imageID": "", "ready": name not in
                         refused, "restartCount": 1, "state": {"waiting": {
                             "reason": "CrashLoopBackOff"}} if name in refused else
                         {"terminated": ended}, "lastState": {"terminated": ended}})
    pods = "/api/v1/namespaces/ai-models/pods"
    await kube.request("POST", pods, body={
        "apiVersion": "v1", "kind": "Pod", "spec": spec,
        "metadata": {"name": "small-pool-x", "namespace": "ai-models",
                     "labels": deployment["spec"]["selector"]["matchLabels"]}})
    await kube.request("PATCH", f"{pods}/small-pool-x/status", body={"status": {
        "phase": "Pending", "initContainerStatuses": statuses}},
        content_type="application/merge-patch+json")


def preset(cluster: Cluster) -> str:
    """The pool's members preset, as the pool's ConfigMap holds it."""
    found = cluster.get("v1", "configmaps", "ai-models", "small-pool")
    assert found is not None
    return str(found["data"]["models.ini"])


async def test_a_member_whose_file_the_pool_refuses_is_left_out_until_it_changes(
        cluster: Cluster, kube: Kube) -> None:
    """One bad file does not keep the others from serving: the member is Failed saying
    why, the pool is rendered without it, and it stays out (its status remembers, the
    pod that said so having gone) until its spec changes."""
    base = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
    for name in ("one", "two", "three"):
        await kube.request("POST", base, body=pool_member(name, f"org/{name}"))
    await reconcile(kube, await current(kube, "one"), Settings())
    deployment = cluster.get("apps/v1", "deployments", "ai-models", "small-pool")
    assert deployment is not None
    await add_pool_pod(kube, deployment, {"two": "ChecksumMismatch: two.gguf has SHA-256 "
                                                 "ab12..., not the one modelSource.sha256 "
                                                 "gives"})
    for name in ("two", "one", "three"):
        await reconcile(kube, await current(kube, name), Settings())
    two = (await current(kube, "two"))["status"]
    placed = next(c for c in two["conditions"] if c["type"] == "Placed")
    assert (two["phase"], placed["reason"]) == ("Failed", "MemberFileRejected")
    assert "ChecksumMismatch: two.gguf has SHA-256 ab12" in placed["message"]
    assert "left out of pool small, whose other members serve" in placed["message"]

    assert "[org/one]" in preset(cluster) and "[org/three]" in preset(cluster)
    assert "[org/two]" not in preset(cluster)
    # the pool rolls without it: the refusing pod goes, and two stays out
    await kube.request("DELETE", "/api/v1/namespaces/ai-models/pods/small-pool-x")
    for name in ("two", "one"):
        await reconcile(kube, await current(kube, name), Settings())
    assert (await current(kube, "two"))["status"]["phase"] == "Failed"
    assert "[org/two]" not in preset(cluster)
    # an edited spec is checked anew
    await kube.merge_patch(*MODELS, "ai-models", "two", body={"spec": {"modelSource": {
        "sha256": "cd" * 32}}})
    for name in ("two", "one"):
        await reconcile(kube, await current(kube, name), Settings())
    assert (await current(kube, "two"))["status"]["phase"] != "Failed"
    assert "[org/two]" in preset(cluster)


async def one_and_a_downloaded_two(kube: Kube, **source: str) -> str:
    """Pool members "one" (a node file) and "two" (from Hugging Face, ``source`` added)."""
    base = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
    for name in ("one", "two"):
        doc = pool_member(name, f"org/{name}")
        if name == "two":
            doc["spec"]["modelSource"] = {"type": "huggingface", **source}
        await kube.request("POST", base, body=doc)
    return base


async def test_a_downloaded_member_gets_its_own_claim_and_one_not_found_is_left_out(
        cluster: Cluster, kube: Kube) -> None:
    """A Hugging Face member: the pool's pod downloads it into a claim only it owns (so the
    download outlives the pool's rollouts); a repo that does not exist leaves it out, as a
    file that fails its check does, and the others serve."""
    await one_and_a_downloaded_two(kube)
    await reconcile(kube, await current(kube, "one"), Settings())
    # the member's own reconcile makes its claim, before the pod that mounts it
    assert cluster.get("v1", "persistentvolumeclaims", "ai-models", "two-pool-cache") is None
    await reconcile(kube, await current(kube, "two"), Settings())
    claim = cluster.get("v1", "persistentvolumeclaims", "ai-models", "two-pool-cache")
    assert claim is not None
    two_uid = (await current(kube, "two"))["metadata"]["uid"]
    assert [o["uid"] for o in claim["metadata"]["ownerReferences"]] == [two_uid]
    deployment = cluster.get("apps/v1", "deployments", "ai-models", "small-pool")
    assert deployment is not None
    init = deployment["spec"]["template"]["spec"]["initContainers"]
    assert [c["name"] for c in init] == ["verify-0", "fetch-1", "verify-1"]
    await add_pool_pod(kube, deployment, {"two": "RepoNotFound: org/two on "
                                                 "https://huggingface.co does not exist"})
    for name in ("two", "one"):
        await reconcile(kube, await current(kube, name), Settings())
    two = (await current(kube, "two"))["status"]
    placed = next(c for c in two["conditions"] if c["type"] == "Placed")
    assert (two["phase"], placed["reason"]) == ("Failed", "MemberFileRejected")
    assert "could not download or check this member's file (RepoNotFound: org/two" in \
        placed["message"]
    assert "[org/one]" in preset(cluster) and "[org/two]" not in preset(cluster)


async def test_a_member_whose_secret_is_missing_waits_out_of_the_pool(
        cluster: Cluster, kube: Kube) -> None:
    """Its fetch container could not start without the Secret, and no member would serve:
    the pool is rendered without it until the Secret exists."""
    await one_and_a_downloaded_two(kube, huggingFaceTokenSecret="hf-token")
    for name in ("one", "two"):
        await reconcile(kube, await current(kube, name), Settings())
    assert "[org/two]" not in preset(cluster)
    two = (await current(kube, "two"))["status"]
    placed = next(c for c in two["conditions"] if c["type"] == "Placed")
    assert placed["reason"] == "SecretMissing" and "hf-token" in placed["message"]
    await kube.request("POST", "/api/v1/namespaces/ai-models/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token"},
        "data": {"token": "aGZfeA=="}})
    for name in ("two", "one"):
        await reconcile(kube, await current(kube, name), Settings())
    assert "[org/two]" in preset(cluster)


async def test_a_member_that_leaves_its_pool_takes_its_claim_away(
        cluster: Cluster, kube: Kube) -> None:
    """Its pool claim is its child: served alone, it downloads into its own cache."""
    base = await one_and_a_downloaded_two(kube)
    for name in ("two", "two", "one"):  # its second look keeps what it made
        await reconcile(kube, await current(kube, name), Settings())
    assert cluster.get("v1", "persistentvolumeclaims", "ai-models", "two-pool-cache")
    await kube.request("PATCH", f"{base}/two", body=[{"op": "remove", "path": "/spec/pool"}],
                       content_type="application/json-patch+json")
    await reconcile(kube, await current(kube, "two"), Settings())
    assert cluster.get("v1", "persistentvolumeclaims", "ai-models", "two-pool-cache") is None
    assert cluster.get("v1", "persistentvolumeclaims", "ai-models", "two-model-cache")


async def test_a_refused_member_stays_in_its_pool_until_its_own_status_says_so(
        cluster: Cluster, kube: Kube) -> None:
    """Another member's look that read the refusal first left the pool without it, so the
    pod that said so went before the member's own look could read it, and the next look
    put it back (on the node the pool rolled back and forth)."""
    base = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
    for name in ("one", "two", "three"):
        await kube.request("POST", base, body=pool_member(name, f"org/{name}"))
    await reconcile(kube, await current(kube, "one"), Settings())
    deployment = cluster.get("apps/v1", "deployments", "ai-models", "small-pool")
    assert deployment is not None
    await add_pool_pod(kube, deployment, {"two": "ChecksumMismatch: not the sha256"})

    for name in ("one", "three"):
        await reconcile(kube, await current(kube, name), Settings())
        assert "[org/two]" in preset(cluster)  # the refusing pod stays for two to read
    await reconcile(kube, await current(kube, "two"), Settings())
    assert (await current(kube, "two"))["status"]["phase"] == "Failed"
    await reconcile(kube, await current(kube, "one"), Settings())
    assert "[org/two]" not in preset(cluster)


async def test_a_member_that_disagrees_fails_and_the_pool_goes_on_without_it(
        cluster: Cluster, kube: Kube) -> None:
    base = "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels"
    for name in ("one", "two"):
        await kube.request("POST", base, body=pool_member(name, f"org/{name}"))
    odd = await kube.request("POST", base, body=pool_member("three", "org/three",
                                                            maxLoaded=2))
    outcome = await reconcile(kube, odd, Settings())
    assert outcome.phase == "Failed"
    placed = next(c for c in (await current(kube, "three"))["status"]["conditions"]
                  if c["type"] == "Placed")
    assert placed["reason"] == "PoolInvalid"
    assert placed["message"].startswith("spec.pool.maxLoaded: 2 here but 1 in one")
    await reconcile(kube, await current(kube, "one"), Settings())
    preset = cluster.get("v1", "configmaps", "ai-models", "small-pool")
    assert preset is not None and "[org/three]" not in preset["data"]["models.ini"]


JUDGED = {"output": [{"name": "safety", "judge": {"model": "ai-models/guard",
                                                  "family": "llama-guard-3"}}]}


async def test_a_missing_judge_model_fails_until_it_is_declared(cluster: Cluster,
                                                               kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    doc = await add_model(kube, "qwen35-9b-cpu", guardrails=JUDGED)
    outcome = await reconcile(kube, doc, Settings())
    assert outcome.phase == "Failed" and kinds(cluster) == []
    assert outcome.waiting_for_reference  # looked at again soon, not at the next resync
    placed = next(c for c in (await current(kube, "qwen35-9b-cpu"))["status"]["conditions"]
                  if c["type"] == "Placed")
    assert placed["reason"] == "JudgeMissing"
    assert placed["message"].startswith("spec.guardrails.output[0].judge.model: guard safety: "
                                        "no LLMModel in the cluster is 'ai-models/guard'")
    guard = copy.deepcopy(sample_doc("qwen35-9b-cpu"))
    guard["metadata"]["name"], guard["spec"]["modelId"] = "guard", "meta-llama/Llama-Guard-3-1B"
    await kube.request("POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/llmmodels",
                       body=guard)
    again = await reconcile(kube, await current(kube, "qwen35-9b-cpu"), Settings())
    assert again.phase != "Failed" and not again.waiting_for_reference
    assert "Deployment/qwen35-9b-cpu" in kinds(cluster)


async def test_impossible_placement_fails_with_the_planners_reason(cluster: Cluster,
                                                                   kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    doc = await add_model(kube, "gemma4-31b-nvidia", totalParametersBillions=6000,
                          quantization="BF16")
    outcome = await reconcile(kube, doc, Settings())
    assert outcome.phase == "Failed" and kinds(cluster) == []
    placed = next(c for c in (await current(kube, "gemma4-31b-nvidia"))["status"]["conditions"]
                  if c["type"] == "Placed")
    assert placed["reason"] == "DoesNotFit"
    assert "more than the 16 one replica may span" in placed["message"]


async def test_nothing_changed_means_no_writes(kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    await add_model(kube, "gemma4-31b-nvidia")
    await reconcile(kube, await current(kube, "gemma4-31b-nvidia"), Settings())
    before = kube.writes
    outcome = await reconcile(kube, await current(kube, "gemma4-31b-nvidia"), Settings())
    assert kube.writes == before
    assert outcome.applied == [] and not outcome.status_written and not outcome.labels_written


async def test_discovery_labels_follow_the_spec(kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    doc = await add_model(kube, "gemma4-31b-nvidia")
    await reconcile(kube, doc, Settings())
    labels = (await current(kube, "gemma4-31b-nvidia"))["metadata"]["labels"]
    assert labels["ai.example.io/domain-vision"] == "true"
    assert labels["ai.example.io/family"] == "gemma4"  # the user's own label
    await kube.merge_patch(*MODELS, "ai-models", "gemma4-31b-nvidia",
                           body={"spec": {"domains": ["code"]}})
    await reconcile(kube, await current(kube, "gemma4-31b-nvidia"), Settings())
    labels = (await current(kube, "gemma4-31b-nvidia"))["metadata"]["labels"]
    assert "ai.example.io/domain-vision" not in labels
    assert labels["ai.example.io/domain-code"] == "true"
    assert labels["ai.example.io/family"] == "gemma4"


async def test_children_no_longer_desired_are_pruned(cluster: Cluster, kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    doc = await add_model(kube, "gemma4-31b-nvidia")
    await reconcile(kube, doc, Settings())
    assert "ScaledObject/gemma4-31b-nvidia" in kinds(cluster)
    await kube.merge_patch(*MODELS, "ai-models", "gemma4-31b-nvidia",
                           body={"spec": {"scaling": {"minReplicas": 2, "maxReplicas": 2}}})
    outcome = await reconcile(kube, await current(kube, "gemma4-31b-nvidia"), Settings())
    assert outcome.pruned == ["ScaledObject/gemma4-31b-nvidia"]
    deploy = cluster.get("apps/v1", "deployments", "ai-models", "gemma4-31b-nvidia")
    assert deploy is not None and deploy["spec"]["replicas"] == 2


async def test_drift_and_deleted_children_are_repaired(cluster: Cluster, kube: Kube) -> None:
    await add_secret(kube, "hf-token", "token")
    doc = await add_model(kube, "gemma4-31b-nvidia")
    await reconcile(kube, doc, Settings())
    await kube.merge_patch("v1", "services", "ai-models", "gemma4-31b-nvidia",
                           body={"spec": {"type": "NodePort"}})
    await kube.delete("v1", "persistentvolumeclaims", "ai-models",
                      "gemma4-31b-nvidia-model-cache")
    outcome = await reconcile(kube, await current(kube, "gemma4-31b-nvidia"), Settings())
    assert sorted(outcome.applied) == ["PersistentVolumeClaim/gemma4-31b-nvidia-model-cache",
                                       "Service/gemma4-31b-nvidia"]
    service = cluster.get("v1", "services", "ai-models", "gemma4-31b-nvidia")
    assert service is not None and service["spec"]["type"] == "ClusterIP"


async def test_transient_api_errors_are_retried(cluster: Cluster, kube: Kube) -> None:
    await add_secret(kube, "openai-api-key", "apiKey")
    doc = await add_model(kube, "gpt55-remote")
    cluster.fail("update", "deployments", 503, times=2)
    cluster.fail("fetch", "configmaps", 500, times=1)
    outcome = await reconcile(kube, doc, Settings())
    assert "Deployment/gpt55-remote" in outcome.applied
    assert cluster.get("apps/v1", "deployments", "ai-models", "gpt55-remote") is not None
