"""A real API server as the tests' client sees it: watch-based waits, models, children."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import uuid
from collections.abc import Callable
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.validation import parse_llmmodel
from llm_operator.kube import RETRYABLE, ApiError, Connection, Kube, from_kubeconfig
from llm_operator.operator.reconciler import Outcome, required_secrets

from controlplane import ControlPlane

API = "ai.example.io/v1alpha1"


def admin(apiserver: ControlPlane) -> Connection:
    """The test's own identity: the control plane's admin."""
    return from_kubeconfig(str(apiserver.kubeconfig))


def fresh_namespace(apiserver: ControlPlane, prefix: str) -> str:
    """A new namespace of the test's own (``prefix-`` and 8 hex digits)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name


def operator_connection(apiserver: ControlPlane) -> Connection:
    """The operator's own identity: a token of its ServiceAccount (config/rbac)."""
    return apiserver.identity("llm-operator", "llm-operator-system")


async def until(kube: Kube, api: str, plural: str, namespace: str, name: str,
                check: Callable[[dict[str, Any] | None], bool], timeout: float = 30
                ) -> dict[str, Any] | None:
    """The object once ``check`` holds for it (None: it is gone), waiting on watch events."""
    async with asyncio.timeout(timeout):
        while True:
            items, version = await kube.list_versioned(api, plural, namespace)
            obj = next((o for o in items if o["metadata"]["name"] == name), None)
            if check(obj):
                return obj
            try:
                async with contextlib.aclosing(kube.watch(
                        api, plural, namespace, resource_version=version,
                        timeout_seconds=60)) as events:
                    async for kind, event in events:
                        if (event.get("metadata") or {}).get("name") != name:
                            continue
                        obj = None if kind == "DELETED" else event
                        if check(obj):
                            return obj
            except ApiError as exc:  # a restarted API server's watch cache is warming up
                if exc.status not in RETRYABLE:
                    raise
                await asyncio.sleep(0.2)  # back off before listing again


def phase_is(*phases: str) -> Callable[[dict[str, Any] | None], bool]:
    return lambda obj: bool(obj and (obj.get("status") or {}).get("phase") in phases)


def exists(obj: dict[str, Any] | None) -> bool:
    return obj is not None


def gone(obj: dict[str, Any] | None) -> bool:
    return obj is None


async def add_secrets(kube: Kube, doc: dict[str, Any], namespace: str) -> None:
    for name, key, _ in required_secrets(parse_llmmodel(doc)):
        await kube.apply({"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": name, "namespace": namespace},
                          "data": {key: base64.b64encode(b"not-a-real-secret").decode()}})


async def create(kube: Kube, doc: dict[str, Any], namespace: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = namespace
    await add_secrets(kube, doc, namespace)
    created: dict[str, Any] = await kube.request(
        "POST", f"/apis/{API}/namespaces/{namespace}/llmmodels", body=doc)
    return created


CORE_KINDS = ("deployments,services,persistentvolumeclaims,configmaps,networkpolicies,"
              "poddisruptionbudgets")
ALL_KINDS = (f"{CORE_KINDS},scaledobjects,httpscaledobjects,servicemonitors,podmonitors,"
             "serviceaccounts,roles,rolebindings,leaderworkersets,disaggregatedsets,"
             "resourceclaimtemplates")


async def children(apiserver: ControlPlane, namespace: str, model: str,
                   kinds: str = ALL_KINDS) -> set[tuple[str, str]]:
    out = await apiserver.akubectl("get", kinds, "-n", namespace, "-l",
                            f"{L.MODEL_NAME}={model}", "-o",
                            "jsonpath={range .items[*]}{.kind}/{.metadata.name}{'\\n'}{end}")
    return {tuple(line.split("/", 1)) for line in out.stdout.split()}  # type: ignore[misc]


class Reconciles:
    """Every finished reconcile, as an event to wait on (the operator's on_reconcile hook)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[tuple[str, str], Outcome]] = asyncio.Queue()
        self.total = 0

    def __call__(self, key: tuple[str, str], outcome: Outcome) -> None:
        self.total += 1
        self.queue.put_nowait((key, outcome))

    async def applying(self, name: str, timeout: float = 30) -> Outcome:
        """The next reconcile of ``name`` that applied something."""
        async with asyncio.timeout(timeout):
            while True:
                key, outcome = await self.queue.get()
                if key[1] == name and outcome.applied:
                    return outcome

    async def quiet(self, names: list[str], timeout: float = 30) -> None:
        """Until each of ``names`` had a reconcile that wrote nothing (needs a short resync)."""
        waiting = set(names)
        async with asyncio.timeout(timeout):
            while waiting:
                key, o = await self.queue.get()
                if not (o.applied or o.pruned or o.status_written or o.labels_written
                        or o.events):
                    waiting.discard(key[1])

    def drain(self) -> None:
        """Forget the reconciles so far."""
        while not self.queue.empty():
            self.queue.get_nowait()

    async def next(self, count: int, name: str | None = None, timeout: float = 30
                   ) -> list[Outcome]:
        """The next ``count`` reconciles (of model ``name`` when given)."""
        out: list[Outcome] = []
        async with asyncio.timeout(timeout):
            while len(out) < count:
                key, outcome = await self.queue.get()
                if name is None or key[1] == name:
                    out.append(outcome)
        return out


async def first_pod(kube: Kube, namespace: str, model: str, timeout: float = 30,
                    also: str = "") -> dict[str, Any]:
    """The model's first Pod (made by the real ReplicaSet controller), waiting on the watch.

    ``also``: more of a label selector (``llm-d.ai/role=decode``).
    """
    selector = ",".join(filter(None, (f"{L.MODEL_NAME}={model}", also)))
    async with asyncio.timeout(timeout):
        items, version = await kube.list_versioned("v1", "pods", namespace, selector)
        if items:
            return items[0]
        async with contextlib.aclosing(kube.watch(
                "v1", "pods", namespace, resource_version=version,
                label_selector=selector)) as events:
            async for kind, pod in events:
                if kind == "ADDED":
                    return pod
    raise AssertionError("unreachable")


async def bind(kube: Kube, namespace: str, pod: str, node: str) -> None:
    """What the scheduler does: bind the Pod to a Node."""
    await kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body={
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node}})


async def set_pod(kube: Kube, pod: dict[str, Any], *, ready: bool,
                  waiting: str | None = None) -> None:
    """What the kubelet does: report the containers' state and the Ready condition."""
    stamp = "2026-11-23T00:00:00Z"
    state = {"waiting": {"reason": waiting}} if waiting else {"running": {"startedAt": stamp}}
    body = {"status": {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                        "lastTransitionTime": stamp}],
        "containerStatuses": [{"name": c["name"], "ready": ready, "restartCount": 0,
                               "image": c["image"], "imageID": "", "state": state}
                              for c in pod["spec"]["containers"]]}}
    await kube.merge_patch("v1", "pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                           body=body, subresource="status")
