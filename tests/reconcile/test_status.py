"""Status is observed, never assumed: Deployment and Pod state -> phase, conditions, events."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import Problem, parse_llmmodel
from llm_operator.reconcile.autoscaling import Report
from llm_operator.reconcile.queue import Admission
from llm_operator.reconcile.status import Blocker, Observation, compute_status, merge_patch

from samples import sample_doc

NOW = "2026-11-22T10:00:00Z"
LATER = "2026-11-22T10:05:00Z"
ENDPOINT = "http://m.ai-models.svc.cluster.local:8000/v1"


def local(generation: int = 3, status: dict[str, Any] | None = None) -> LLMModel:
    doc = copy.deepcopy(sample_doc("gemma4-31b-nvidia"))
    doc["metadata"]["generation"] = generation
    if status:
        doc["status"] = status
    return parse_llmmodel(doc)


def remote() -> LLMModel:
    return parse_llmmodel(sample_doc("gpt55-remote"))


def deployment(replicas: int = 1, ready: int = 0, updated: int | None = None,
               conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"spec": {"replicas": replicas}, "status": {
        "readyReplicas": ready, "updatedReplicas": replicas if updated is None else updated,
        "conditions": conditions or []}}


def pod(name: str = "m-7d9f-abc12", node: str | None = "gpu-node-1", ready: bool = False,
        init: list[dict[str, Any]] | None = None, containers: list[dict[str, Any]] | None = None,
        unschedulable: str | None = None, terminating: bool = False) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if unschedulable:
        conditions.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": unschedulable})
    meta: dict[str, Any] = {"name": name}
    if terminating:
        meta["deletionTimestamp"] = NOW
    return {"metadata": meta, "spec": {"nodeName": node} if node else {},
            "status": {"conditions": conditions, "initContainerStatuses": init or [],
                       "containerStatuses": containers or []}}


def running(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"running": {}}}


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


def oom(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
            "restartCount": 3}


def timed_out(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 124}}, "restartCount": 1}


DONE_INIT = [{"name": "model-fetch", "state": {"terminated": {"exitCode": 0}}}]
FILE_FACTS = ('{"architecture": "gemma3", "contextLength": 32768, "file": "gemma.gguf", '
              '"headCount": 4, "headCountKV": 1, "layers": 18, "quantization": "Q4_K_M", '
              '"sha256": "' + "ab" * 32 + '", "sizeBytes": 253113024}')


def verified(message: str = FILE_FACTS, exit_code: int = 0) -> dict[str, Any]:
    """model-verify's status: its termination message is the file's facts, or why not."""
    if exit_code == 0:
        return {"name": "model-verify", "state": {"terminated": {"exitCode": 0,
                                                                 "message": message}}}
    return {"name": "model-verify", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": exit_code, "message": message}},
            "restartCount": 2}

def refused(message: str) -> dict[str, Any]:
    """model-fetch ended with a reason (its termination message) and kubelet backs off."""
    return {"name": "model-fetch", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "message": message}},
            "restartCount": 1}


# (case, observation, phase, endpoint set, degraded reason or None)
PHASES: list[tuple[str, Observation, str, bool, str | None]] = [
    ("nothing yet", Observation(), "Pending", False, None),
    ("deployment, no pods", Observation(deployment=deployment()), "Pending", False, None),
    ("unschedulable", Observation(deployment=deployment(), pods=[
        pod(node=None, unschedulable="0/3 nodes: 3 Insufficient nvidia.com/gpu")]),
     "Pending", False, None),
    ("downloading", Observation(deployment=deployment(), pods=[
        pod(init=[running("model-fetch")])]), "Downloading", False, None),
    ("starting", Observation(deployment=deployment(), pods=[
        pod(init=DONE_INIT, containers=[running("inference-server")])]),
     "Starting", False, None),
    ("ready", Observation(deployment=deployment(ready=1), pods=[
        pod(ready=True, containers=[running("inference-server")])]), "Ready", True, None),
    ("one of two crash-looping", Observation(deployment=deployment(replicas=2, ready=1), pods=[
        pod(ready=True), pod(name="m-7d9f-def34", node="gpu-node-2", containers=[
            waiting("inference-server", "CrashLoopBackOff", "back-off 5m0s")])]),
     "Degraded", True, "CrashLoopBackOff"),
    ("image pull failing", Observation(deployment=deployment(), pods=[
        pod(containers=[waiting("inference-server", "ImagePullBackOff", "not found")])]),
     "Degraded", False, "ImagePullBackOff"),
    ("out of memory", Observation(deployment=deployment(), pods=[
        pod(containers=[oom("inference-server")])]), "Degraded", False, "OOMKilled"),
    ("download crash-looping", Observation(deployment=deployment(), pods=[
        pod(init=[waiting("model-fetch", "CrashLoopBackOff")])]),
     "Degraded", False, "DownloadFailed"),
    ("download timed out", Observation(deployment=deployment(), pods=[
        pod(init=[timed_out("model-fetch")])]), "Degraded", False, "DownloadTimedOut"),
    ("no such repo: never downloads", Observation(deployment=deployment(), pods=[
        pod(init=[refused("RepoNotFound: local/nope on http://hub:8090 does not exist")])]),
     "Failed", False, "RepoNotFound"),
    ("no file matches the quantization", Observation(deployment=deployment(), pods=[
        pod(init=[refused("NoMatchingFile: no file of o/r matches *Q2_K*.gguf")])]),
     "Failed", False, "NoMatchingFile"),
    ("the token refused", Observation(deployment=deployment(), pods=[
        pod(init=[refused("TokenRefused: o/r on https://huggingface.co refused the token in "
                          "Secret hf-token (key token): HTTP 403")])]),
     "Failed", False, "TokenRefused"),
    ("a download that broke is retried", Observation(deployment=deployment(), pods=[
        pod(init=[refused("DownloadFailed: downloading o/r failed: ConnectError")])]),
     "Degraded", False, "DownloadFailed"),
    ("checksum mismatch: never served", Observation(deployment=deployment(), pods=[
        pod(init=[*DONE_INIT, verified("ChecksumMismatch: gemma.gguf has SHA-256 00…", 1)])]),
     "Failed", False, "ChecksumMismatch"),
    ("not a GGUF file", Observation(deployment=deployment(), pods=[
        pod(init=[*DONE_INIT, verified("NotGGUF: gemma.gguf: not a GGUF file", 1)])]),
     "Failed", False, "NotGGUF"),
    ("model check crashed", Observation(deployment=deployment(), pods=[
        pod(init=[*DONE_INIT, verified("Traceback (most recent call last): ...", 1)])]),
     "Degraded", False, "ModelCheckFailed"),
    ("a new file failing while the old replica serves", Observation(
        deployment=deployment(replicas=2, ready=1), pods=[
            pod(ready=True), pod(name="m-7d9f-def34", init=[
                *DONE_INIT, verified("ChecksumMismatch: gemma.gguf has SHA-256 00…", 1)])]),
     "Degraded", True, "ChecksumMismatch"),
    ("scaled to zero", Observation(deployment=deployment(replicas=0),
                                   scaled_to_zero_allowed=True), "Idle", False, None),
    ("terminating pods ignored", Observation(deployment=deployment(ready=0), pods=[
        pod(terminating=True, containers=[waiting("inference-server", "CrashLoopBackOff")])]),
     "Pending", False, None),
    ("does not fit", Observation(blockers=[Blocker.from_problem(Problem(
        "spec.resources", "needs ~214 GiB but 1x H100 gives 72 GiB"))]), "Failed", False, None),
]


@pytest.mark.parametrize(("case", "obs", "phase", "has_endpoint", "degraded"), PHASES,
                         ids=[p[0] for p in PHASES])
def test_phase_follows_the_observed_children(case: str, obs: Observation, phase: str,
                                             has_endpoint: bool, degraded: str | None) -> None:
    update = compute_status(local(), obs, ENDPOINT, NOW)
    status = update.status
    assert status.phase == phase
    assert (status.endpoint == ENDPOINT) is has_endpoint
    conditions = {c.type: c for c in status.conditions or []}
    assert set(conditions) == {"Placed", "Ready", "Available", "Progressing", "Degraded"}
    assert (conditions["Degraded"].status == "True") is (degraded is not None)
    if degraded:
        assert conditions["Degraded"].reason == degraded
    assert conditions["Ready"].status == ("True" if has_endpoint else "False")
    assert status.observed_generation == 3
    assert all(c.observed_generation == 3 for c in conditions.values())


@pytest.mark.parametrize(("ready", "phase"), [(0, "Starting"), (2, "Proxying")])
def test_remote_models_proxy_once_the_gateway_is_ready(ready: int, phase: str) -> None:
    pods = [pod(name=f"g-{i}", ready=i < ready, containers=[running("gateway")])
            for i in range(2)]
    update = compute_status(remote(), Observation(deployment=deployment(2, ready), pods=pods),
                            ENDPOINT, NOW)
    assert update.status.phase == phase
    assert update.status.current_replicas == ready


@pytest.mark.parametrize(("path", "reason"), [
    ("spec.resources", "DoesNotFit"),
    ("spec.resources.acceleratorCount", "DoesNotFit"),
    ("spec.serving.nodes", "DoesNotFit"),
    ("spec.serving.disaggregation.prefill.resources.acceleratorCount", "DoesNotFit"),
    ("spec.inferenceEngine", "EngineUnsupported"),
    ("spec.engineArgs", "UnsupportedEngineArgs"),
    ("spec.scaling.minReplicas", "ScaleToZeroUnavailable"),
    ("spec.scaling.maxReplicas", "InvalidSpec"),
    ("spec.modelSource.path", "InvalidSpec"),
])
def test_a_placement_problem_is_reported_under_its_fields_reason(path: str, reason: str) -> None:
    assert Blocker.from_problem(Problem(path, "m")).reason == reason


def test_failed_says_why_and_what_to_change() -> None:
    obs = Observation(blockers=[
        Blocker.secret_missing("hf-token", "token", "spec.modelSource.huggingFaceTokenSecret")])
    status = compute_status(local(), obs, ENDPOINT, NOW).status
    placed = next(c for c in status.conditions or [] if c.type == "Placed")
    assert (placed.status, placed.reason) == ("False", "SecretMissing")
    assert "create it" in placed.message and "hf-token" in placed.message


def test_unschedulable_pods_clear_placed() -> None:
    obs = Observation(deployment=deployment(), pods=[
        pod(node=None, unschedulable="0/3 nodes: 3 Insufficient nvidia.com/gpu")])
    placed = next(c for c in compute_status(local(), obs, ENDPOINT, NOW).status.conditions or []
                  if c.type == "Placed")
    assert (placed.status, placed.reason) == ("False", "Unschedulable")
    assert "Insufficient nvidia.com/gpu" in placed.message


def test_a_claim_no_devices_satisfy_waits_for_gpus_in_the_schedulers_words() -> None:
    message = ("0/1 nodes are available: 1 cannot allocate all claims. still not schedulable, "
               "preemption: 0/1 nodes are available: 1 Preemption is not helpful for "
               "scheduling.")
    claimed = pod(node=None, unschedulable=message)
    claimed["spec"]["resourceClaims"] = [{"name": "accelerators",
                                          "resourceClaimTemplateName": "m-accelerators"}]
    status = compute_status(local(), Observation(deployment=deployment(), pods=[claimed]),
                            ENDPOINT, NOW).status
    assert status.phase == "WaitingForGPU"
    placed = next(c for c in status.conditions or [] if c.type == "Placed")
    assert (placed.status, placed.reason) == ("False", "InsufficientCapacity")
    assert placed.message == ("waiting for accelerators: no devices satisfy the model's claim "
                              f"now: {message}")


def test_prefetched_nodes_are_those_whose_prefetch_pod_runs() -> None:
    def prefetching(node: str | None, phase: str, terminating: bool = False) -> dict[str, Any]:
        found = pod(name=f"p-{node}", node=node, terminating=terminating)
        found["status"]["phase"] = phase
        return found

    obs = Observation(deployment=deployment(), pods=[pod()], prefetch_pods=[
        prefetching("gpu-2", "Running"), prefetching("gpu-1", "Running"),
        prefetching("gpu-3", "Pending"),  # still pulling (its init containers)
        prefetching(None, "Pending"),  # not scheduled
        prefetching("gpu-4", "Running", terminating=True)])
    status = compute_status(local(), obs, ENDPOINT, NOW).status
    assert status.prefetched_nodes == ["gpu-1", "gpu-2"]
    assert status.accelerator_nodes == ["gpu-node-1"]  # prefetch pods are not replicas
    assert compute_status(local(), Observation(deployment=deployment(), pods=[pod()]),
                          ENDPOINT, NOW).status.prefetched_nodes is None


def test_nodes_replicas_and_metrics_are_reported() -> None:
    obs = Observation(deployment=deployment(2, 2), pods=[
        pod(name="a", node="gpu-2", ready=True), pod(name="b", node="gpu-1", ready=True)],
        requests_per_minute=120, average_latency_ms=850, plan_verdict="tight",
        plan_reason="fits 1x H100 but above the declared 24 GiB")
    status = compute_status(local(), obs, ENDPOINT, NOW).status
    assert status.accelerator_nodes == ["gpu-1", "gpu-2"]
    assert (status.current_replicas, status.requests_per_minute,
            status.average_latency_ms) == (2, 120, 850)
    placed = next(c for c in status.conditions or [] if c.type == "Placed")
    assert (placed.reason, placed.message) == ("Tight", obs.plan_reason)


@pytest.mark.parametrize(("obs", "condition", "desired"), [
    (Observation(deployment=deployment(2, 1), pods=[pod(ready=True)],
                 scaling=Report(True, "Load", "1 -> 2 replica(s): 8 request(s)")),
     ("True", "Load", "1 -> 2 replica(s): 8 request(s)"), 2),
    (Observation(deployment=deployment(1, 1), pods=[pod(ready=True)],
                 scaling=Report(False, "NoSignal", "holding 1 replica(s): router down")),
     ("False", "NoSignal", "holding 1 replica(s): router down"), 1),
    (Observation(deployment=deployment(1, 1), pods=[pod(ready=True)]), None, 1),  # fixed
    (Observation(scaling=Report(True, "Steady", "x"),  # queued: nothing scales yet
                 queued=Admission(False, 1, "no node has 4 free H100")), None, None),
], ids=["autoscaled", "no-signal", "fixed-replicas", "waiting-for-gpu"])
def test_scaling_condition_and_desired_replicas(
        obs: Observation, condition: tuple[str, str, str] | None, desired: int | None) -> None:
    status = compute_status(local(), obs, ENDPOINT, NOW).status
    found = next(((c.status, c.reason, c.message) for c in status.conditions or []
                  if c.type == "Scaling"), None)
    assert (found, status.desired_replicas) == (condition, desired)


def test_progress_deadline_and_rollouts() -> None:
    stuck = Observation(deployment=deployment(conditions=[{
        "type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
        "message": "ReplicaSet m-1 has timed out progressing."}]))
    rolling = Observation(deployment=deployment(replicas=2, ready=2, updated=1),
                          pods=[pod(ready=True), pod(name="b", ready=True)])

    def progressing(obs: Observation) -> tuple[str, str]:
        cond = next(c for c in compute_status(local(), obs, ENDPOINT, NOW).status.conditions
                    or [] if c.type == "Progressing")
        return cond.status, cond.reason

    assert progressing(stuck) == ("False", "ProgressDeadlineExceeded")
    assert progressing(rolling) == ("True", "RollingOut")


def test_phase_changes_emit_events_warnings_for_trouble() -> None:
    first = compute_status(local(), Observation(deployment=deployment(), pods=[
        pod(init=[running("model-fetch")])]), ENDPOINT, NOW)
    assert [(e.type, e.reason) for e in first.events] == [("Normal", "Downloading")]
    assert first.events[0].message.startswith("new -> Downloading")
    before = local(status=first.patch())
    broken = compute_status(before, Observation(deployment=deployment(), pods=[
        pod(containers=[oom("inference-server")])]), ENDPOINT, LATER)
    assert [(e.type, e.reason) for e in broken.events] == [("Warning", "Degraded")]


def test_unchanged_cluster_means_no_write_and_no_event() -> None:
    obs = Observation(deployment=deployment(ready=1), pods=[pod(ready=True)])
    first = compute_status(local(), obs, ENDPOINT, NOW)
    assert first.changed
    again = compute_status(local(status=first.patch()), obs, ENDPOINT, LATER)
    assert not again.changed and again.events == []
    assert again.status == first.status  # transition times kept


def test_transition_time_moves_only_when_a_condition_flips() -> None:
    starting = compute_status(local(), Observation(deployment=deployment(), pods=[
        pod(init=DONE_INIT)]), ENDPOINT, NOW)
    ready = compute_status(local(status=starting.patch()), Observation(
        deployment=deployment(ready=1), pods=[pod(ready=True)]), ENDPOINT, LATER)
    times = {c.type: c.last_transition_time for c in ready.status.conditions or []}
    assert times["Ready"] == LATER and times["Placed"] == NOW and times["Degraded"] == NOW


def test_new_generation_is_a_change() -> None:
    obs = Observation(deployment=deployment(ready=1), pods=[pod(ready=True)])
    first = compute_status(local(generation=3), obs, ENDPOINT, NOW)
    bumped = compute_status(local(generation=4, status=first.patch()), obs, ENDPOINT, NOW)
    assert bumped.changed and bumped.status.observed_generation == 4


def test_status_patch_validates_against_the_crd() -> None:
    import jsonschema  # noqa: PLC0415

    from k8s_schemas import _strict, llmmodel_schema  # noqa: PLC0415

    update = compute_status(local(), Observation(deployment=deployment(ready=1),
                                                 pods=[pod(ready=True)]), ENDPOINT, NOW)
    schema = _strict(llmmodel_schema())["properties"]["status"]
    jsonschema.Draft4Validator(schema).validate(update.patch())


def test_the_checked_files_header_becomes_status_model() -> None:
    ready = Observation(deployment=deployment(ready=1), pods=[
        pod(ready=True, init=[*DONE_INIT, verified()], containers=[running("inference-server")])])
    model = compute_status(local(), ready, ENDPOINT, NOW).status.model
    assert model is not None
    assert (model.architecture, model.layers, model.head_count_kv, model.size_bytes) == \
        ("gemma3", 18, 1, 253113024)
    # scaled to zero later: no pod to read it from, the last reading stays
    before = local(status=compute_status(local(), ready, ENDPOINT, NOW).patch())
    idle = Observation(deployment=deployment(replicas=0), scaled_to_zero_allowed=True)
    assert compute_status(before, idle, ENDPOINT, LATER).status.model == model
    # a rejected file is not described as the one being served
    rejected = Observation(deployment=deployment(), pods=[pod(init=[
        *DONE_INIT, verified("ChecksumMismatch: gemma.gguf has SHA-256 00…", 1)])])
    failed = compute_status(before, rejected, ENDPOINT, LATER).status
    assert failed.model is None
    assert failed.phase == "Failed" and "gemma.gguf has SHA-256" in (failed.conditions or [])[
        [c.type for c in failed.conditions or []].index("Degraded")].message


@pytest.mark.parametrize(("old", "new", "patch"), [
    ({"phase": "Ready", "endpoint": "http://m/v1"}, {"phase": "Degraded"},
     {"phase": "Degraded", "endpoint": None}),  # not serving: the endpoint goes
    ({"model": {"file": "a.gguf", "sha256": "ab"}}, {"model": {"file": "b.gguf"}},
     {"model": {"file": "b.gguf", "sha256": None}}),
    ({"model": {"file": "a.gguf"}, "phase": "Ready"}, {"phase": "Failed"},
     {"model": None, "phase": "Failed"}),
    ({"acceleratorNodes": ["n1", "n2"]}, {"acceleratorNodes": ["n1"]},
     {"acceleratorNodes": ["n1"]}),  # lists are replaced whole
    ({"phase": "Ready"}, {"phase": "Ready"}, {"phase": "Ready"}),  # all of new, always
])
def test_the_status_patch_clears_what_is_no_longer_true(
        old: dict[str, Any], new: dict[str, Any], patch: dict[str, Any]) -> None:
    assert merge_patch(old, new) == patch


def test_a_model_that_stops_serving_loses_its_endpoint() -> None:
    serving = compute_status(local(), Observation(deployment=deployment(ready=1), pods=[
        pod(ready=True)]), ENDPOINT, NOW)
    broken = compute_status(local(status=serving.patch()), Observation(
        deployment=deployment(), pods=[pod(containers=[oom("inference-server")])]),
        ENDPOINT, LATER)
    assert broken.patch()["endpoint"] is None


@pytest.mark.parametrize(("admission", "position", "placed", "message"), [
    (Admission(False, 2, "waiting for accelerators: needs 1 x 8 nvidia.com/gpu; 4 free"), 2,
     "WaitingForGPU", "queue position 2: waiting for accelerators: needs 1 x 8"),
    (Admission(False, None, "needs 1 x 16 nvidia.com/gpu, and no set of matching nodes"),
     None, "InsufficientCapacity", "needs 1 x 16 nvidia.com/gpu"),
])
def test_a_queued_model_waits_for_gpus_and_says_where_it_stands(
        admission: Admission, position: int | None, placed: str, message: str) -> None:
    update = compute_status(local(), Observation(queued=admission), ENDPOINT, NOW)
    status = update.status
    assert (status.phase, status.queue_position, status.endpoint) == \
        ("WaitingForGPU", position, None)
    conditions = {c.type: c for c in status.conditions or []}
    assert (conditions["Placed"].status, conditions["Placed"].reason) == ("False", placed)
    assert conditions["Placed"].message.startswith(message)
    assert conditions["Progressing"].reason == "WaitingForGPU"
    assert [(e.type, e.reason) for e in update.events] == [("Normal", "WaitingForGPU")]
    # admitted later: the position goes with the phase
    started = compute_status(local(status=update.patch()), Observation(
        deployment=deployment(), pods=[pod(init=[running("model-fetch")])]), ENDPOINT, LATER)
    assert started.status.phase == "Downloading" and started.status.queue_position is None
    if position:
        assert started.patch()["queuePosition"] is None
