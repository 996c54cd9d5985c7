"""Observed children -> LLMModel status: phase, conditions, endpoint and events (pure).

The operator lists the model's Deployment and Pods and hands them here as the API returned
them; nothing about the status is assumed from having applied objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from llm_operator.api.model_status import Condition, LLMModelStatus, ModelFileStatus, Phase
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import Problem
from llm_operator.profiles.kv_tier import status_quantity
from llm_operator.reconcile import workloads
from llm_operator.reconcile.autoscaling import Report
from llm_operator.reconcile.queue import Admission

# Container waiting reasons that mean "this replica is broken", not "still starting".
FAILING_WAITING = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
    "CreateContainerError", "InvalidImageName", "RunContainerError",
})
FETCH_CONTAINER = "model-fetch"
VERIFY_CONTAINER = "model-verify"  # its termination message: status.model, or why not
# model-verify's reasons: the file must never be served (-> phase Failed, not Degraded)
FILE_REJECTED = frozenset({"ChecksumMismatch", "NotGGUF", "NoModelFile"})
# model-fetch's reasons for a source that cannot be fetched (fetch.hub.PERMANENT).
SOURCE_REJECTED = frozenset({"RepoNotFound", "TokenRefused", "NoMatchingFile"})
# The init containers that state why they failed ("Reason: text", their termination
# message), and the reasons no retry changes: the model is Failed with them.
STATED = {VERIFY_CONTAINER: FILE_REJECTED, FETCH_CONTAINER: SOURCE_REJECTED}
TIMEOUT_EXIT_CODE = 124  # coreutils timeout: the download exceeded downloadTimeoutSeconds
SERVING_PHASES = frozenset({"Ready", "Proxying", "Degraded"})

# Placement problem path (or a field above it) -> Placed=False reason. The planner's
# refusals name the field to change: spec.resources..., spec.serving.nodes, a role's cards.
BLOCKER_REASONS = {
    "spec.resources": "DoesNotFit",
    "spec.serving": "DoesNotFit",
    "spec.inferenceEngine": "EngineUnsupported",
    "spec.engineArgs": "UnsupportedEngineArgs",
    "spec.scaling.minReplicas": "ScaleToZeroUnavailable",
    "spec.pool": "PoolInvalid",
    "spec.acceleratorVendor": "PoolInvalid",  # across a pool's members only
}


def blocker_reason(path: str) -> str:
    """The Placed=False reason of a placement problem at ``path``: its own, or its parent's."""
    while path:
        if path in BLOCKER_REASONS:
            return BLOCKER_REASONS[path]
        path = path.rpartition(".")[0]
    return "InvalidSpec"


@dataclass(frozen=True)
class Blocker:
    """Why a model cannot be placed at all (-> phase Failed, nothing is created)."""

    reason: str
    message: str

    @classmethod
    def from_problem(cls, problem: Problem) -> Blocker:
        return cls(blocker_reason(problem.path), str(problem))

    @classmethod
    def judge_missing(cls, problem: Problem) -> Blocker:
        return cls("JudgeMissing", str(problem))

    @classmethod
    def secret_missing(cls, name: str, key: str, field_path: str) -> Blocker:
        return cls("SecretMissing", f"{field_path}: Secret {name!r} with key {key!r} does not "
                   "exist in the model's namespace: create it, or fix the name")


@dataclass(frozen=True)
class Observation:
    """What the operator saw in the cluster for one model."""

    deployment: dict[str, Any] | None = None
    pods: list[dict[str, Any]] = field(default_factory=list)
    prefetch_pods: list[dict[str, Any]] = field(default_factory=list)  # scaling.prefetchImages
    blockers: list[Blocker] = field(default_factory=list)
    plan_verdict: str = "fits"
    plan_reason: str = ""
    scaled_to_zero_allowed: bool = False  # minReplicas 0 with KEDA in charge
    requests_per_minute: int | None = None
    average_latency_ms: int | None = None
    queued: Admission | None = None  # not admitted by the GPU queue: no workload yet
    scaling: Report | None = None  # who sets the replicas of an autoscaled model, and why
    # a pool member: what its pool's engine says of it (loaded, loading, unloaded, failed;
    # None: the engine did not answer)
    pool_member: str | None = None
    pool_member_error: str | None = None  # failed: the engine's reason, from its log


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class PodIssue:
    """One replica that is failing, and why."""

    pod: str
    container: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"pod {self.pod} container {self.container}: {self.reason}" + (
            f" ({self.message})" if self.message else "")


def merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) that makes ``old`` into ``new``.

    All of ``new``, and null for each field ``old`` has and ``new`` lacks, at every depth.
    Without the nulls a merge patch would leave those fields in place (a model that stopped
    serving kept its endpoint). All of ``new`` is sent, not only what changed: the status
    converges even if ``old`` (the watch cache) lags the server.
    """
    patch: dict[str, Any] = {k: None for k in old if k not in new}
    for key, value in new.items():
        before = old.get(key)
        patch[key] = merge_patch(before, value) if isinstance(value, dict) \
            and isinstance(before, dict) else value
    return patch


@dataclass(frozen=True)
class StatusUpdate:
    status: LLMModelStatus
    events: list[Event]
    changed: bool
    previous: LLMModelStatus = field(default_factory=LLMModelStatus)

    def patch(self) -> dict[str, Any]:
        """The `status` body for a merge patch of the status subresource."""
        return merge_patch(self._wire(self.previous), self._wire(self.status))

    @staticmethod
    def _wire(status: LLMModelStatus) -> dict[str, Any]:
        return status.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- reading pods ---------------------------------------------------------------------------

def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", "?"))


def _statuses(pod: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return list(pod.get("status", {}).get(key) or [])


def _issue(pod: dict[str, Any], cs: dict[str, Any]) -> PodIssue | None:
    state, last = cs.get("state") or {}, cs.get("lastState") or {}
    waiting = state.get("waiting") or {}
    terminated = last.get("terminated") or state.get("terminated") or {}
    container = str(cs.get("name", "?"))
    if terminated.get("reason") == "OOMKilled":
        return PodIssue(_name(pod), container, "OOMKilled",
                        "out of memory: raise resources.memoryGiB or lower the context")
    if container in STATED and terminated.get("exitCode") not in (None, 0):
        reason, _, text = str(terminated.get("message", "")).strip().partition(": ")
        if reason in STATED[container]:
            return PodIssue(_name(pod), container, reason, text[:600])
        if container == VERIFY_CONTAINER:
            return PodIssue(_name(pod), container, "ModelCheckFailed",
                            str(terminated.get("message", ""))[:300])
    if container == FETCH_CONTAINER and terminated.get("exitCode") == TIMEOUT_EXIT_CODE:
        return PodIssue(_name(pod), container, "DownloadTimedOut",
                        "the weights did not download within the operator's "
                        "downloadTimeoutSeconds")
    if waiting.get("reason") in FAILING_WAITING:
        reason = str(waiting["reason"])
        if container == FETCH_CONTAINER and reason == "CrashLoopBackOff":
            reason = "DownloadFailed"
        return PodIssue(_name(pod), container, reason, str(waiting.get("message", ""))[:300])
    return None


def pod_issues(pods: list[dict[str, Any]]) -> list[PodIssue]:
    issues = []
    for pod in pods:
        for cs in _statuses(pod, "initContainerStatuses") + _statuses(pod, "containerStatuses"):
            issue = _issue(pod, cs)
            if issue is not None:
                issues.append(issue)
    return issues


def _downloading(pod: dict[str, Any]) -> bool:
    return any(cs.get("name") == FETCH_CONTAINER and "running" in (cs.get("state") or {})
               for cs in _statuses(pod, "initContainerStatuses"))


def model_file(pods: list[dict[str, Any]]) -> ModelFileStatus | None:
    """What model-verify read from the GGUF header (its termination message), if it ran."""
    for pod in pods:
        for cs in _statuses(pod, "initContainerStatuses"):
            if cs.get("name") != VERIFY_CONTAINER:
                continue
            for state in (cs.get("state") or {}, cs.get("lastState") or {}):
                terminated = state.get("terminated") or {}
                if terminated.get("exitCode") == 0 and terminated.get("message"):
                    try:
                        return ModelFileStatus.model_validate_json(terminated["message"])
                    except ValidationError:
                        continue
    return None


def prefetched_nodes(pods: list[dict[str, Any]]) -> list[str]:
    """Nodes whose prefetch pod runs: its init containers pulled every image it holds."""
    return sorted({str(node) for p in pods
                   if (p.get("status") or {}).get("phase") == "Running"
                   and not (p.get("metadata") or {}).get("deletionTimestamp")
                   and (node := (p.get("spec") or {}).get("nodeName"))})


def _unschedulable(pod: dict[str, Any]) -> str | None:
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False" \
                and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", "no node fits the pod"))
    return None


def _condition(status: dict[str, Any], kind: str) -> str | None:
    """The status (True, False, Unknown) of a workload's condition, None when it has none."""
    return next((str(c.get("status")) for c in status.get("conditions") or []
                 if c.get("type") == kind), None)


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


# --- the mapping ----------------------------------------------------------------------------

@dataclass(frozen=True)
class _Facts:
    phase: Phase
    message: str
    ready: int
    desired: int
    issues: list[PodIssue]
    unschedulable: str | None
    nodes: list[str]
    rolling: bool
    deadline_exceeded: str | None


def _facts(model: LLMModel, obs: Observation) -> _Facts:
    pods = [p for p in obs.pods if not p.get("metadata", {}).get("deletionTimestamp")]
    deploy = obs.deployment
    spec = (deploy or {}).get("spec", {})
    dstatus = (deploy or {}).get("status", {})
    desired = int(spec.get("replicas", 1)) if deploy else 0
    ready = int(dstatus.get("readyReplicas", 0)) if deploy else 0
    kind = str((deploy or {}).get("kind", workloads.DEPLOYMENT))
    serving = [p for p in pods if workloads.serving(kind, p)]
    ready = max(ready, sum(_ready(p) for p in serving)) if deploy else 0
    issues = pod_issues(pods)
    unschedulable = next((m for p in pods if (m := _unschedulable(p))), None)
    nodes = sorted({str(n) for p in pods if (n := p.get("spec", {}).get("nodeName"))})
    rolling = bool(deploy) and int(dstatus.get("updatedReplicas", desired)) < desired
    if kind != workloads.DEPLOYMENT:  # it says itself whether an update is rolling out
        rolling = _condition(dstatus, "UpdateInProgress") == "True"
    deadline = next((str(c.get("message", "")) for c in dstatus.get("conditions") or []
                     if c.get("type") == "Progressing" and c.get("status") == "False"
                     and c.get("reason") == "ProgressDeadlineExceeded"), None)
    serving_phase: Phase = "Proxying" if model.spec.is_remote else "Ready"
    summary = "; ".join(str(i) for i in issues[:3])
    phase: Phase
    if obs.blockers:
        phase, message = "Failed", "; ".join(b.message for b in obs.blockers)
    elif obs.queued is not None and deploy is None:
        where = f"queue position {obs.queued.position}: " if obs.queued.position else ""
        phase, message = "WaitingForGPU", where + obs.queued.reason
    elif deploy is None:
        phase, message = "Pending", "waiting for the workload to be created"
    elif ready >= 1:
        phase = "Degraded" if issues else serving_phase
        message = f"{ready}/{desired} replicas ready" + (f"; failing: {summary}" if issues else "")
    elif rejected := [i for i in issues if i.reason in FILE_REJECTED | SOURCE_REJECTED]:
        what = ("the model file is not served" if rejected[0].reason in FILE_REJECTED
                else "the model cannot be downloaded")
        phase, message = "Failed", f"{what}: {rejected[0].message}"
    elif issues:
        phase, message = "Degraded", f"no replica ready; failing: {summary}"
    elif any(_downloading(p) for p in pods):
        phase, message = "Downloading", "fetching model weights into the cache"
    elif any(p.get("spec", {}).get("nodeName") for p in pods):
        phase, message = "Starting", "containers are starting; the model is loading"
    elif desired == 0 and obs.scaled_to_zero_allowed:
        phase, message = "Idle", "scaled to zero; the next request wakes it"
    elif unschedulable and any((p.get("spec") or {}).get("resourceClaims") for p in pods):
        phase, message = "WaitingForGPU", ("waiting for accelerators: no devices satisfy the "
                                           f"model's claim now: {unschedulable}")
    elif unschedulable:
        phase, message = "Pending", f"no node can run the model: {unschedulable}"
    else:
        phase, message = "Pending", "waiting for a replica to be scheduled"
    return _Facts(phase, message, ready, desired, issues, unschedulable, nodes, rolling,
                  deadline)


def _conditions(model: LLMModel, obs: Observation, facts: _Facts) -> list[tuple[str, bool,
                                                                               str, str]]:
    """(type, status, reason, message) of each condition (Scaling: autoscaled models only)."""
    phase = facts.phase
    if obs.blockers:
        placed = (False, obs.blockers[0].reason, "; ".join(b.message for b in obs.blockers))
    elif phase == "WaitingForGPU":
        reason = "WaitingForGPU" if obs.queued and obs.queued.position else \
            "InsufficientCapacity"
        placed = (False, reason, facts.message)
    elif facts.unschedulable and facts.ready == 0:
        placed = (False, "Unschedulable", facts.unschedulable)
    else:
        reason = "Tight" if obs.plan_verdict == "tight" else "Fits"
        placed = (True, reason, obs.plan_reason or "placement checked")
    serving = phase in SERVING_PHASES and facts.ready >= 1
    ready = (True, "Serving", facts.message) if serving else (False, phase, facts.message)
    if phase == "Idle":
        available = (True, "ScaledToZero", facts.message)
    elif facts.desired and facts.ready >= facts.desired:
        available = (True, "MinimumReplicasAvailable", facts.message)
    else:
        available = (False, "MinimumReplicasUnavailable", facts.message)
    if facts.deadline_exceeded:
        progressing = (False, "ProgressDeadlineExceeded", facts.deadline_exceeded)
    elif phase in {"Pending", "Downloading", "Starting", "WaitingForGPU"} and not obs.blockers:
        progressing = (True, phase, facts.message)
    elif facts.rolling:
        progressing = (True, "RollingOut", "replacing replicas with the current spec")
    else:
        progressing = (False, "Settled", "no change in progress")
    if facts.issues:
        first = facts.issues[0]
        degraded = (True, first.reason, "; ".join(str(i) for i in facts.issues[:5]))
    else:
        degraded = (False, "AsExpected", "no replica is failing")
    scaling = [] if obs.scaling is None or obs.blockers or facts.phase == "WaitingForGPU" \
        else [("Scaling", obs.scaling.active, obs.scaling.reason, obs.scaling.message)]
    loaded = [] if model.spec.pool is None or model.spec.is_remote or obs.blockers \
        else [("Loaded", *_loaded(model, obs.pool_member, obs.pool_member_error))]
    return [("Placed", *placed), ("Ready", *ready), ("Available", *available),
            ("Progressing", *progressing), ("Degraded", *degraded), *scaling, *loaded]


def _loaded(model: LLMModel, state: str | None, error: str | None
            ) -> tuple[bool, str, str]:
    """A pool member's Loaded condition, from its pool's engine (its transition: since when).

    ``error``: why the engine could not load it, in the engine's words (its log).
    """
    pool = model.spec.pool
    assert pool is not None
    if state == "loaded":
        idle = f"; unloaded after {pool.idle_seconds} s without a request" \
            if pool.idle_seconds else ""
        return True, "Loaded", f"loaded in pool {pool.name}{idle}"
    if state == "loading":
        return False, "Loading", f"being loaded in pool {pool.name}; requests wait for it"
    if state == "failed" and error:
        return False, "LoadFailed", (f"the engine of pool {pool.name} could not load it: "
                                     f"{error}; the next request tries again")
    if state == "failed":
        return False, "LoadFailed", (f"the engine of pool {pool.name} exited while loading it "
                                     "(its log says why); the next request tries again")
    if state == "sleeping":
        return False, "Asleep", (f"asleep after {pool.idle_seconds or 0} s without a request "
                                 f"(pool.idleSeconds): its weights are unloaded in pool "
                                 f"{pool.name}, its next request wakes it")
    if state == "unloaded":
        return False, "NotLoaded", (f"not loaded: its next request loads it (pool "
                                    f"{pool.name} keeps at most {pool.max_loaded} loaded)")
    return False, "Unknown", f"the engine of pool {pool.name} did not say (not running yet?)"


def compute_status(model: LLMModel, obs: Observation, endpoint: str, now: str) -> StatusUpdate:
    """The status this model should have given what was observed, and the events to emit.

    ``now`` (RFC 3339) stamps conditions whose status flips; unchanged conditions keep their
    lastTransitionTime, so an unchanged cluster yields ``changed=False`` and no write.
    """
    facts = _facts(model, obs)
    old = model.status or LLMModelStatus()
    previous = {c.type: c for c in old.conditions or []}
    generation = model.metadata.generation
    conditions = []
    for kind, ok, reason, message in _conditions(model, obs, facts):
        flag: Literal["True", "False"] = "True" if ok else "False"
        before = previous.get(kind)
        since = before.last_transition_time if before and before.status == flag else now
        conditions.append(Condition(type=kind, status=flag, reason=reason,
                                    message=message[:32768], last_transition_time=since,
                                    observed_generation=generation))
    serving = facts.phase in SERVING_PHASES and facts.ready >= 1
    status = LLMModelStatus(
        phase=facts.phase,
        endpoint=endpoint if serving else None,
        conditions=conditions,
        accelerator_nodes=facts.nodes or None,
        prefetched_nodes=prefetched_nodes(obs.prefetch_pods) or None,
        current_replicas=facts.ready,
        desired_replicas=facts.desired if obs.deployment is not None else None,
        requests_per_minute=obs.requests_per_minute,
        average_latency_ms=obs.average_latency_ms,
        observed_generation=generation,
        model=model_file(obs.pods) or (old.model if facts.phase != "Failed" else None),
        queue_position=obs.queued.position if facts.phase == "WaitingForGPU" and obs.queued
        else None,
        host_kv_cache=status_quantity(model.spec),
    )
    events: list[Event] = []
    if facts.phase != old.phase:
        severity: Literal["Normal", "Warning"] = (
            "Warning" if facts.phase in {"Failed", "Degraded"} else "Normal")
        events.append(Event(severity, facts.phase,
                            f"{old.phase or 'new'} -> {facts.phase}: {facts.message}"))
    changed = status.model_dump(mode="json") != old.model_dump(mode="json")
    return StatusUpdate(status, events, changed, old)
