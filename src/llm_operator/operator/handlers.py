"""kopf handlers: when to reconcile an LLMModel (spec changes, its children's changes, resync)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.web
import kopf

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import GROUP, PLURAL, VERSION, LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.kube import Connection, Kube
from llm_operator.operator import mcp_push
from llm_operator.operator.leader import LeaderElector, LeaseTerms
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.operator.prometheus import status_metrics
from llm_operator.operator.reconciler import reconcile, record_events
from llm_operator.profiles.settings import McpPush, Settings
from llm_operator.reconcile.status import Event

log = logging.getLogger("llm_operator.operator")
ANNOTATION_PREFIX = f"operator.{GROUP}"


@dataclass
class State:
    kube: Kube
    settings: Settings
    resync_seconds: float
    idle_seconds: float = 5.0  # how long kopf keeps an idle per-object worker
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    prometheus: aiohttp.ClientSession | None = None  # set when status metrics are on
    http: aiohttp.ClientSession | None = None  # set when MCP pushes are on
    pushed: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)

    @property
    def push(self) -> McpPush | None:
        return self.settings.mcp if self.settings.mcp.admin_url else None


async def _reconcile(state: State, namespace: str, name: str, *, children: bool = True
                     ) -> None:
    """One reconcile at a time per model, on the model as it is now.

    kopf runs the model's own handlers one at a time, but a Deployment or Pod event arrives
    through other handlers: without the lock both would apply the same children at once.
    The model is re-read under the lock: the body an event carried may predate the status
    the previous reconcile wrote, and comparing against it would write that status again.
    """
    key = (namespace, name)
    lock = state.locks.setdefault(key, asyncio.Lock())
    state.metrics.queued.inc()
    try:
        await lock.acquire()
    finally:
        state.metrics.queued.dec()
    try:
        doc = await state.kube.get(f"{GROUP}/{VERSION}", PLURAL, *key)
        if doc is None or doc["metadata"].get("deletionTimestamp"):
            return
        with state.metrics.in_flight.track_inprogress():
            await _reconcile_now(state, doc, children=children)
    finally:
        lock.release()


async def _reconcile_now(state: State, doc: dict[str, Any], *, children: bool) -> None:
    metrics = state.metrics
    started = time.monotonic()
    usage = None
    if state.prometheus is not None:
        usage = functools.partial(status_metrics, state.prometheus,
                                  state.settings.prometheus_address)
    try:
        outcome = await reconcile(state.kube, doc, state.settings, usage=usage,
                                  children=children)
    except InvalidModel as exc:  # the CRD's validation should have refused it
        metrics.reconciles.labels("invalid").inc()
        raise kopf.PermanentError(f"invalid LLMModel: {exc}") from None
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
        metrics.set_phase(doc["metadata"].get("namespace", ""), doc["metadata"]["name"],
                          outcome.phase)
    if outcome.applied or outcome.pruned:
        log.info("%s/%s: applied %s, pruned %s, phase %s", doc["metadata"].get("namespace"),
                 doc["metadata"]["name"], outcome.applied, outcome.pruned, outcome.phase)
    if state.push is not None and outcome.model is not None:
        await _push_registration(state, outcome.model)


async def _push_registration(state: State, model: LLMModel) -> None:
    """Tell the MCP server about a serving model once (its watch would find it anyway)."""
    assert state.http is not None and state.push is not None
    body = mcp_push.payload(model)
    key = (model.namespace, model.name)
    if body is None or state.pushed.get(key) == body:
        return
    try:
        await mcp_push.register(state.http, state.push, body)
        state.pushed[key] = body
    except mcp_push.PushError as exc:
        log.warning("%s/%s: %s; the MCP server's watch will pick the model up", *key, exc)


async def _deregister(state: State, body: dict[str, Any], retry: int) -> None:
    """Remove a deleted model's tool; bounded retries, then a Warning event and release."""
    push = state.push
    spec = body.get("spec") or {}
    exposure = spec.get("mcpExposure") or {}
    tool = exposure.get("toolName")
    meta = body.get("metadata", {})
    state.pushed.pop((meta.get("namespace", ""), meta.get("name", "")), None)
    if push is None or not exposure.get("enabled") or not tool:
        return
    assert state.http is not None
    try:
        await mcp_push.deregister(state.http, push, tool)
    except mcp_push.PushError as exc:
        if retry + 1 < push.attempts:
            raise kopf.TemporaryError(f"{exc}; retrying", delay=min(30, 2 ** retry)) from None
        model = parse_llmmodel(_with_status_dropped(body))
        await record_events(state.kube, model, [Event(
            "Warning", "MCPDeregistrationFailed",
            f"could not remove tool {tool} from the MCP server after {push.attempts} "
            f"attempts ({exc}); deleting anyway, its watch drops the tool")])
        log.warning("%s/%s: giving up MCP deregistration of %s: %s", meta.get("namespace"),
                    meta.get("name"), tool, exc)


def _with_status_dropped(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "status"}


def build_registry(state: State, conn: Connection) -> kopf.OperatorRegistry:
    """Handlers bound to one operator run (no global registry: tests run several)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.startup(registry=registry)
    def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING  # events for problems, not every handler
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX)
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
        settings.persistence.finalizer = L.MCP_CLEANUP_FINALIZER
        settings.watching.server_timeout = 300
        settings.queueing.idle_timeout = state.idle_seconds

    @kopf.on.login(registry=registry)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server=conn.server, token=conn.token, ca_path=conn.ca_file,
                                   certificate_path=conn.cert_file,
                                   private_key_path=conn.key_file,
                                   insecure=not conn.verify, default_namespace=None)

    @kopf.on.resume(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.create(GROUP, VERSION, PLURAL, registry=registry)
    @kopf.on.update(GROUP, VERSION, PLURAL, field="spec", registry=registry)
    async def model_changed(namespace: str | None, name: str, **_: Any) -> None:
        await _reconcile(state, namespace or "", name)

    @kopf.timer(GROUP, VERSION, PLURAL, interval=state.resync_seconds, idle=None,
                registry=registry)
    async def resync(namespace: str | None, name: str, **_: Any) -> None:
        await _reconcile(state, namespace or "", name)

    def on_child_change(children: bool) -> Callable[..., Awaitable[None]]:
        """A Deployment change may be drift (full reconcile); a Pod change only status."""

        async def changed(body: kopf.Body, **_: Any) -> None:
            labels = body.get("metadata", {}).get("labels") or {}
            namespace = body.get("metadata", {}).get("namespace")
            if namespace and L.MODEL_NAME in labels:
                await _reconcile(state, namespace, labels[L.MODEL_NAME], children=children)

        return changed

    # With MCP pushes configured the delete handler holds the finalizer
    # (ai.example.io/mcp-cleanup) until the tool is deregistered or the attempts run out;
    # without, nothing needs cleaning and deletion is never held up.
    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry, optional=state.push is None)
    async def model_deleted(body: kopf.Body, retry: int, **_: Any) -> None:
        meta = body.get("metadata", {})
        state.metrics.forget(meta.get("namespace", ""), meta.get("name", ""))
        state.locks.pop((meta.get("namespace", ""), meta.get("name", "")), None)
        await _deregister(state, _plain(body), retry)

    kopf.on.event("apps", "v1", "deployments", registry=registry,
                  labels={L.K8S_MANAGED_BY: L.MANAGED_BY_VALUE})(on_child_change(True))
    kopf.on.event("", "v1", "pods", registry=registry,
                  labels={L.MODEL_NAME: kopf.PRESENT})(on_child_change(False))
    return registry


def _plain(body: kopf.Body) -> dict[str, Any]:
    """A plain, detached dict of a kopf body."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict) or hasattr(value, "items"):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return plain(body)  # type: ignore[no-any-return]


class LeadershipLost(RuntimeError):
    """The Lease went to another replica (or could not be renewed): this one must stop."""


async def run_operator(conn: Connection, settings: Settings, *,
                       namespaces: Collection[str] = (), clusterwide: bool = True,
                       resync_seconds: float = 60.0, idle_seconds: float = 5.0,
                       liveness: str | None = None, metrics_port: int | None = None,
                       metrics: OperatorMetrics | None = None,
                       stop: asyncio.Event | None = None,
                       ready: asyncio.Event | None = None,
                       leader: LeaseTerms | None = None) -> None:
    """Run the operator until ``stop`` is set (or forever).

    With ``leader``, it first waits to hold that Lease, renews it while it works, stops
    (raising LeadershipLost) when it is lost, and releases it on a clean stop.
    """
    async with Kube(conn) as kube:
        state = State(kube, settings, resync_seconds, idle_seconds,
                      metrics or OperatorMetrics())
        if metrics_port is not None:
            state.metrics.serve(metrics_port)
        elector = LeaderElector(kube, leader) if leader is not None else None
        if elector is not None:
            probe = await _standby_probe(liveness)
            waiting = asyncio.ensure_future(elector.acquire())
            stopped = asyncio.ensure_future((stop or asyncio.Event()).wait())
            try:
                await asyncio.wait({waiting, stopped}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopped.cancel()
                if probe is not None:
                    await probe.cleanup()  # kopf serves the endpoint from here on
            if not waiting.done():  # asked to stop while standing by
                waiting.cancel()
                return
        halt = asyncio.Event()
        watchers = [asyncio.ensure_future(_set_when(halt, e))
                    for e in (stop, elector.lost if elector else None) if e is not None]
        holding = asyncio.ensure_future(elector.hold()) if elector else None
        if settings.status_metrics:
            state.prometheus = aiohttp.ClientSession()
        if state.push is not None:
            state.http = aiohttp.ClientSession()
        try:
            await kopf.operator(registry=build_registry(state, conn), clusterwide=clusterwide,
                                namespaces=namespaces, standalone=True, stop_flag=halt,
                                ready_flag=ready, liveness_endpoint=liveness)
        finally:
            for task in [*watchers, *([holding] if holding else [])]:
                task.cancel()
            for session in (state.prometheus, state.http):
                if session is not None:
                    await session.close()
            if elector is not None and not elector.lost.is_set():
                await elector.release()
        if elector is not None and elector.lost.is_set():
            raise LeadershipLost("lost the operator Lease; exiting so a fresh replica stands by")


async def _standby_probe(liveness: str | None) -> aiohttp.web.AppRunner | None:
    """While standing by, answer the liveness URL (200 "standby"): probes must not kill us."""
    if not liveness:
        return None
    url = urlsplit(liveness)
    app = aiohttp.web.Application()

    async def standby(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"status": "standby"})

    app.router.add_get(url.path or "/", standby)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, url.hostname, url.port or 80).start()
    return runner


async def _set_when(target: asyncio.Event, source: asyncio.Event) -> None:
    await source.wait()
    target.set()
