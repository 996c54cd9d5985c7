"""The controller: watch caches, what to reconcile when, workers, resync and the MCP finalizer."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

import aiohttp
from opentelemetry.trace import NoOpTracer, Tracer

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import API_VERSION, LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.connectors import tcp_connector
from llm_operator.informer import Informer, Key, key_of
from llm_operator.kube import PLURALS, ApiError, Kube
from llm_operator.operator import mcp_push
from llm_operator.operator.autoscaler import ROUTER_SLICES_KIND, Autoscaler
from llm_operator.operator.caches import (
    MODEL_KIND,
    NODE_KIND,
    POD_KIND,
    PREFETCH_POD_KIND,
    SLICE_KIND,
    Caches,
)
from llm_operator.operator.gpu_queue import GpuQueue, wants_accelerators
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.operator.pooled import member_state
from llm_operator.operator.prometheus import status_metrics
from llm_operator.operator.reconciler import (
    CHILD_KINDS,
    PRIORITY_CLASS,
    Outcome,
    reconcile,
    record_events,
)
from llm_operator.operator.workqueue import WorkQueue
from llm_operator.profiles.settings import McpPush, Settings
from llm_operator.reconcile.status import Event
from llm_operator.telemetry import tracer_provider

log = logging.getLogger("llm_operator.operator")
FINALIZER = L.MCP_CLEANUP_FINALIZER
RECHECK_SECONDS = 10.0  # a model waiting for its Secret or judge model looks again this often
# What a model's own change must touch to be reconciled: not its status (we write that).
_VOLATILE_META = ("resourceVersion", "managedFields")


def _identity(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in _VOLATILE_META}
    return {**{k: v for k, v in obj.items() if k not in {"status", "metadata"}}, "metadata": meta}


class Controller:
    """Reconciles every LLMModel in ``namespaces`` (empty: all) from watch caches.

    A model is queued when it appears, when anything but its status changes, when one of
    its children or Pods changes, every ``resync_seconds``, and after a failure (with
    backoff). ``workers`` reconciles run at once, never two for one model. A finalizer is
    set only where there is something to clean up on delete (MCP pushes configured and the
    model exposed); models never wait for the operator to be deleted otherwise.
    """

    def __init__(self, kube: Kube, settings: Settings, *, namespaces: Collection[str] = (),
                 resync_seconds: float = 60.0, workers: int = 4,
                 metrics: OperatorMetrics | None = None,
                 on_reconcile: Callable[[Key, Outcome], None] | None = None) -> None:
        self.kube, self.settings = kube, settings
        self.on_reconcile = on_reconcile  # told of every finished reconcile (tests, benches)
        # a span per reconcile and per write, where tracing is configured (docs/tracing.md)
        self.tracing = tracer_provider(settings.tracing, "operator")
        self.tracer: Tracer = self.tracing.get_tracer("llm_operator.operator") \
            if self.tracing is not None else NoOpTracer()
        self.resync_seconds, self.workers = resync_seconds, workers
        self.metrics = metrics or OperatorMetrics()
        self.queue: WorkQueue[Key] = WorkQueue()
        self.metrics.queued.set_function(lambda: len(self.queue))
        self.metrics.in_flight.set_function(lambda: self.queue.in_flight)
        self.caches = Caches(list(namespaces) or [None])
        self.prometheus: aiohttp.ClientSession | None = None
        self.http: aiohttp.ClientSession | None = None
        self.pools_http: aiohttp.ClientSession | None = None  # pool engines' member states
        self.pushed: dict[Key, dict[str, Any]] = {}
        self.deregister_attempts: dict[Key, int] = {}
        # Namespaces being deleted: they refuse every create (Services, Events), so their
        # models are left alone until a new model there shows the namespace is back.
        self.terminating: set[str] = set()
        informer = functools.partial(Informer, kube)
        self.caches.add(MODEL_KIND, functools.partial(
            informer, API_VERSION, "llmmodels", on_change=self._model_changed))
        managed = f"{L.K8S_MANAGED_BY}={L.MANAGED_BY_VALUE}"
        for kind in CHILD_KINDS:
            self.caches.add(kind, functools.partial(
                informer, kind[0], PLURALS[kind], label_selector=managed,
                on_change=self._child_changed, index_label=L.MODEL_NAME))
        self.caches.add(PREFETCH_POD_KIND, functools.partial(
            informer, "v1", "pods", label_selector=L.PREFETCH_FOR,
            on_change=functools.partial(self._child_changed, label=L.PREFETCH_FOR),
            index_label=L.PREFETCH_FOR))
        self.caches.add(POD_KIND, functools.partial(
            informer, "v1", "pods", label_selector=L.MODEL_NAME, on_change=self._child_changed,
            index_label=L.MODEL_NAME))
        # Cluster-wide: a model whose pods' class is missing waits until it is installed.
        self.caches.informers[PRIORITY_CLASS] = {None: informer(
            PRIORITY_CLASS[0], PLURALS[PRIORITY_CLASS], on_change=self._classes_changed)}
        # the built-in autoscaler finds the router here (pools scale by it under KEDA too)
        router = settings.router
        self.caches.informers[ROUTER_SLICES_KIND] = {router.namespace: informer(
            "discovery.k8s.io/v1", "endpointslices", namespace=router.namespace,
            label_selector=f"kubernetes.io/service-name={router.service}")}
        self.autoscaler = Autoscaler(kube, settings, self.caches, requeue=self.queue.add,
                                     metrics=self.metrics)
        self.gpu_queue: GpuQueue | None = None
        self.accelerator_keys: set[Key] = set()  # the models the GPU queue looks at
        # The GPU queue's capacity, and the runtimes that decide how model images mount.
        nodes = informer("v1", "nodes", on_change=self._nodes_changed)
        self.caches.informers[NODE_KIND] = {None: nodes}
        if settings.scheduling.gpu_queue:
            slices = informer("resource.k8s.io/v1", "resourceslices",
                              on_change=self._slices_changed)
            self.caches.informers[SLICE_KIND] = {None: slices}

            def cached_nodes() -> list[dict[str, Any]]:
                return list(nodes.objects.values())  # a relist replaces the dict

            def cached_slices() -> list[dict[str, Any]]:
                return list(slices.objects.values())  # none where DRA is not served

            self.gpu_queue = GpuQueue(settings, self._accelerator_models,
                                      self.caches.workloads, cached_nodes, cached_slices)

    @property
    def push(self) -> McpPush | None:
        return self.settings.mcp if self.settings.mcp.admin_url else None

    # --- triggers ---------------------------------------------------------------------

    def _model_changed(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None
                       ) -> None:
        key = key_of(obj)
        if kind != "DELETED" and wants_accelerators(obj):
            self.accelerator_keys.add(key)
        else:
            self.accelerator_keys.discard(key)
        if kind == "DELETED":
            self.queue.drop(key)
            self.metrics.forget(*key)
            self.pushed.pop(key, None)
            self.deregister_attempts.pop(key, None)
            self._admissions_changed()  # its accelerators are free for the next in line
        elif previous is None or _identity(obj) != _identity(previous):
            if previous is None:  # nothing is created in a namespace being deleted
                self.terminating.discard(key[0])
            self.queue.add(key)

    def _child_changed(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None,
                       *, label: str = L.MODEL_NAME) -> None:
        """A child (or a prefetch pod, whose model is named by ``label``) changed."""
        namespace = key_of(obj)[0]
        name = ((obj.get("metadata") or {}).get("labels") or {}).get(label)
        if name and self.caches.model(namespace, name) is not None:
            self.queue.add((namespace, name))

    def _classes_changed(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None
                         ) -> None:
        """A PriorityClass came or went: the models that wait for one (or need it) look again."""
        if previous is None or kind == "DELETED":
            for doc in self.caches.models():
                self.queue.add(key_of(doc))

    def _accelerator_models(self) -> list[dict[str, Any]]:
        return [d for k in self.accelerator_keys if (d := self.caches.model(*k)) is not None]

    def _nodes_changed(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None
                       ) -> None:
        def differs(*path: str) -> bool:
            now, before = obj, previous or {}
            for key in path:
                now, before = now.get(key) or {}, before.get(key) or {}
            return now != before

        placeable = kind == "DELETED" or previous is None or \
            differs("spec", "unschedulable") or differs("metadata", "labels")
        if placeable or differs("status", "allocatable"):
            self._admissions_changed()
        if placeable or differs("status", "nodeInfo"):
            for doc in self.caches.models():  # how model images mount may change
                if ((doc.get("spec") or {}).get("modelSource") or {}).get("type") == "oci":
                    self.queue.add(key_of(doc))

    def _slices_changed(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None
                        ) -> None:
        """A DRA driver published or withdrew devices: the GPU queue counts them."""
        self._admissions_changed()

    def _admissions_changed(self, *, besides: Key | None = None) -> None:
        """Reconcile the models whose place in the GPU queue changed.

        Capacity freed or a higher priority arrived: they start, or their position moves.
        """
        if self.gpu_queue is None or not self.accelerator_keys \
                or not all(i.synced.is_set() for i in self.caches.all()):
            return
        for key in self.gpu_queue.changed():
            if key != besides:
                self.queue.add(key)

    # --- running ----------------------------------------------------------------------

    async def run(self, ready: asyncio.Event | None = None) -> None:
        """Watch, reconcile and resync until cancelled."""
        if self.settings.status_metrics:
            self.prometheus = aiohttp.ClientSession(connector=tcp_connector())
        if self.push is not None:
            self.http = aiohttp.ClientSession(connector=tcp_connector())
        self.pools_http = aiohttp.ClientSession(connector=tcp_connector())
        tasks = [asyncio.create_task(i.run()) for i in self.caches.all()]
        try:
            await _first_of(asyncio.gather(*(i.synced.wait() for i in self.caches.all())),
                            tasks)
            tasks += [asyncio.create_task(self._worker()) for _ in range(self.workers)]
            tasks.append(asyncio.create_task(self._resync()))
            tasks.append(asyncio.create_task(self.autoscaler.run()))
            if ready is not None:
                ready.set()
            await _first_of(asyncio.Event().wait(), tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self.queue.close()
            for session in (self.prometheus, self.http, self.pools_http):
                if session is not None:
                    await session.close()
            if self.tracing is not None:  # the spans still batched (its HTTP is blocking)
                await asyncio.to_thread(self.tracing.shutdown)

    async def _resync(self) -> None:
        """Queue every model now (the start-up pass), then every ``resync_seconds``."""
        while True:
            for obj in self.caches.models():
                self.queue.add(key_of(obj))
            await asyncio.sleep(self.resync_seconds)

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                await self._handle(key)
                self.queue.forget(key)
            except ApiError as exc:
                if not exc.namespace_terminating:
                    self._retry(key, exc)
                    continue
                self.queue.forget(key)  # nothing can be written there any more
                if key[0] not in self.terminating:
                    self.terminating.add(key[0])
                    log.info("namespace %s is being deleted: its models are not reconciled "
                             "while it is (%s)", key[0], exc.message)
            except Exception as exc:
                self._retry(key, exc)
            finally:
                self.queue.done(key)

    def _retry(self, key: Key, exc: Exception) -> None:
        delay = self.queue.retry(key)
        log.warning("%s/%s: %s: %s; retrying in %.0f s", *key, type(exc).__name__, exc, delay)

    async def _handle(self, key: Key) -> None:
        doc = self.caches.model(*key)
        if doc is None:
            return
        if key[0] in self.terminating and not doc["metadata"].get("deletionTimestamp"):
            if self.on_reconcile is not None:  # its namespace refuses every create
                self.on_reconcile(key, Outcome(namespace_terminating=True))
            return
        finalizers = doc["metadata"].get("finalizers") or []
        if doc["metadata"].get("deletionTimestamp"):
            if FINALIZER in finalizers:
                await self._deregister(doc)
                await self._set_finalizer(doc, wanted=False)
            return
        wanted = self._wants_finalizer(doc)
        if wanted != (FINALIZER in finalizers):
            doc = await self._set_finalizer(doc, wanted=wanted)
        await self._reconcile(doc)

    async def _reconcile(self, doc: dict[str, Any]) -> None:
        metrics, key = self.metrics, key_of(doc)
        usage = None
        if self.prometheus is not None:
            usage = functools.partial(status_metrics, self.prometheus,
                                      self.settings.prometheus_address)
        started = time.monotonic()
        try:
            with self.tracer.start_as_current_span("llmop.reconcile", attributes={
                    "k8s.namespace.name": key[0], "llmop.model": key[1]}) as span:
                outcome = await reconcile(
                    self.kube, doc, self.settings, view=self.caches, usage=usage,
                    admission=self.gpu_queue.admission if self.gpu_queue else None,
                    scaling=self.autoscaler.report, tracer=self.tracer,
                    pool_state=None if self.pools_http is None else functools.partial(
                        member_state, self.pools_http, self.settings.cluster_domain))
                span.set_attributes({"llmop.phase": outcome.phase or "",
                                     "llmop.applied": len(outcome.applied),
                                     "llmop.pruned": len(outcome.pruned)})
        except InvalidModel as exc:  # the CRD's validation should have refused it
            metrics.reconciles.labels("invalid").inc()
            log.error("%s/%s: invalid LLMModel, not reconciled: %s", *key, exc)
            return
        except Exception:
            metrics.errors.inc()
            metrics.reconciles.labels("error").inc()
            raise
        finally:
            metrics.duration.observe(time.monotonic() - started)
        metrics.reconciles.labels("ok").inc()
        metrics.applied.inc(len(outcome.applied))
        metrics.pruned.inc(len(outcome.pruned))
        if outcome.phase:
            metrics.set_phase(*key, outcome.phase)
        if outcome.applied or outcome.pruned:
            log.info("%s/%s: applied %s, pruned %s, phase %s", *key, outcome.reasons,
                     outcome.pruned, outcome.phase)
            if outcome.skipped:
                log.warning("%s/%s: not created, the cluster does not serve their kind "
                            "(install KEDA / Prometheus-Operator to have them): %s", *key,
                            outcome.skipped)
        if outcome.waiting_for_reference:
            self.queue.add_after(key, RECHECK_SECONDS)
        elif outcome.recheck_after is not None:
            self.queue.add_after(key, outcome.recheck_after)
        self._admissions_changed(besides=key)
        if self.on_reconcile is not None:
            self.on_reconcile(key, outcome)
        if self.push is not None and outcome.model is not None:
            await self._push_registration(outcome.model)

    # --- MCP pushes and the finalizer ---------------------------------------------------

    def _wants_finalizer(self, doc: dict[str, Any]) -> bool:
        exposure = (doc.get("spec") or {}).get("mcpExposure") or {}
        return self.push is not None and bool(exposure.get("enabled"))

    async def _set_finalizer(self, doc: dict[str, Any], *, wanted: bool) -> dict[str, Any]:
        """Add or remove our finalizer with a JSON patch that fails on a concurrent change."""
        meta = doc["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        guard = {"op": "test", "path": "/metadata/resourceVersion",
                 "value": meta["resourceVersion"]}
        if wanted:
            change = ({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER}
                      if finalizers else
                      {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]})
        else:
            change = {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(FINALIZER)}"}
        namespace, name = key_of(doc)
        path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmmodels/{name}"
        try:
            result: dict[str, Any] = await self.kube.request(
                "PATCH", path, body=[guard, change], content_type="application/json-patch+json")
        except ApiError as exc:
            if exc.status == 404:
                return doc
            raise
        self.caches.stored(result)
        return result

    async def _push_registration(self, model: LLMModel) -> None:
        """Tell the MCP server about a serving model once (its watch would find it anyway)."""
        assert self.http is not None and self.push is not None
        body = mcp_push.payload(model)
        key = (model.namespace, model.name)
        if body is None or self.pushed.get(key) == body:
            return
        try:
            await mcp_push.register(self.http, self.push, body)
            self.pushed[key] = body
        except mcp_push.PushError as exc:
            log.warning("%s/%s: %s; the MCP server's watch will pick the model up", *key, exc)

    async def _deregister(self, doc: dict[str, Any]) -> None:
        """Remove a deleted model's tool: bounded attempts, then a Warning event and release."""
        push, key = self.push, key_of(doc)
        exposure = (doc.get("spec") or {}).get("mcpExposure") or {}
        tool = exposure.get("toolName")
        self.pushed.pop(key, None)
        if push is None or not exposure.get("enabled") or not tool:
            return
        assert self.http is not None
        try:
            await mcp_push.deregister(self.http, push, tool)
        except mcp_push.PushError as exc:
            attempts = self.deregister_attempts[key] = self.deregister_attempts.get(key, 0) + 1
            if attempts < push.attempts:
                raise
            model = parse_llmmodel({k: v for k, v in doc.items() if k != "status"})
            await record_events(self.kube, model, [Event(
                "Warning", "MCPDeregistrationFailed",
                f"could not remove tool {tool} from the MCP server after {push.attempts} "
                f"attempts ({exc}); deleting anyway, its watch drops the tool")])
            log.warning("%s/%s: giving up MCP deregistration of %s: %s", *key, tool, exc)


async def _first_of(awaitable: Any, tasks: list[asyncio.Task[Any]]) -> None:
    """Wait for ``awaitable``; a background task that ends first re-raises its error."""
    waiting = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({waiting, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not waiting:
                task.result()
                raise RuntimeError("a background task of the operator stopped")
    finally:
        if not waiting.done():
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiting
