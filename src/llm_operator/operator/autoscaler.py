"""The built-in autoscaler's loop: the router's counts -> each model's workload scale (I/O).

It runs inside the controller, so only on the leader. Every ``intervalSeconds`` it reads
``GET /scale`` from each ready router replica (found in the router Service's EndpointSlices,
watched), and for every autoscaled model whose Deployment (or LeaderWorkerSet) is in the
watch cache it takes one pure step (reconcile.autoscaling) and writes its ``scale``
subresource when the count changes, with an Event. Nothing else is read from the API
server. It stands aside while KEDA sets the replicas (settings ``autoscaler``), so there is
one writer at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.connectors import tcp_connector
from llm_operator.informer import Key, key_of
from llm_operator.kube import PLURALS, ApiError, Kube
from llm_operator.operator.caches import Caches
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.operator.reconciler import record_events
from llm_operator.profiles.settings import Settings
from llm_operator.reconcile import workloads
from llm_operator.reconcile.autoscaling import (
    Loads,
    Memory,
    Observation,
    Policy,
    Report,
    combine,
    report_after,
    router_endpoints,
    step,
)
from llm_operator.reconcile.status import Event
from llm_operator.render.scaling import autoscaled

log = logging.getLogger("llm_operator.autoscaler")
FIELD_MANAGER = "llm-operator-autoscaler"
KEDA_KIND = ("keda.sh/v1alpha1", "ScaledObject")
# A model's workload with a scale subresource: one or the other.
SCALED_KINDS = (workloads.DEPLOYMENT_REF, workloads.LWS_REF)
ROUTER_SLICES_KIND = ("discovery.k8s.io/v1", "EndpointSlice")
# After a write, its count is the current one until the watch delivers it (or this passes).
WRITTEN_SECONDS = 5.0
ROUTER_TIMEOUT_SECONDS = 2.0

ReadLoads = Callable[[], Awaitable["Loads | str"]]  # str: why there is no signal


class Autoscaler:
    """Sets autoscaled models' replicas from the router's counts when KEDA does not."""

    def __init__(self, kube: Kube, settings: Settings, caches: Caches, *,
                 requeue: Callable[[Key], None], metrics: OperatorMetrics,
                 read: ReadLoads | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.settings, self.caches = kube, settings, caches
        self.requeue, self.metrics, self.clock = requeue, metrics, clock
        self.read = read or self._read_router
        self.memory: dict[Key, Memory] = {}
        self.reports: dict[Key, Report] = {}
        self.written: dict[Key, tuple[int, float]] = {}
        self._parsed: dict[Key, tuple[str, LLMModel, Policy]] = {}  # by resourceVersion
        self._http: aiohttp.ClientSession | None = None
        self._was_builtin: bool | None = None

    # --- who scales ---------------------------------------------------------------------

    def builtin(self) -> bool:
        """The built-in autoscaler sets replicas now (else KEDA does, or should)."""
        mode = self.settings.autoscaler
        return mode == "builtin" or (mode == "auto" and not self.caches.serves(*KEDA_KIND))

    def report(self, model: LLMModel) -> Report | None:
        """The model's Scaling condition (None: its replicas are fixed, min == max)."""
        if not autoscaled(model):
            return None
        if self.builtin():
            return self.reports.get((model.namespace, model.name))
        if self.caches.serves(*KEDA_KIND):
            return Report(True, "KEDA", f"KEDA sets the replicas (ScaledObject {model.name}); "
                          f"operator setting autoscaler: {self.settings.autoscaler}")
        return Report(False, "KEDANotInstalled", "operator setting autoscaler is keda, but "
                      "the cluster does not serve ScaledObjects: the replicas stay where they "
                      "are. Install KEDA, or set autoscaler: auto (or builtin)")

    # --- the loop -------------------------------------------------------------------------

    async def run(self) -> None:
        """Look every ``builtinAutoscaler.intervalSeconds`` until cancelled."""
        timeout = aiohttp.ClientTimeout(total=ROUTER_TIMEOUT_SECONDS)
        async with aiohttp.ClientSession(connector=tcp_connector(), timeout=timeout) as http:
            self._http = http
            while True:
                try:
                    await self.look()
                except (ApiError, aiohttp.ClientError, OSError) as exc:
                    log.warning("autoscaler: %s: %s; looking again", type(exc).__name__, exc)
                await asyncio.sleep(self.settings.builtin_autoscaler.interval_seconds)

    async def look(self) -> None:
        """One look at every autoscaled model: step, and write what changed."""
        builtin = self.builtin()
        if builtin != self._was_builtin:
            self._handed_over(builtin)
        if not builtin:
            return
        self.metrics.autoscaler_looks.inc()
        loads = await self.read()
        now = self.clock()
        docs = self.caches.models()
        for doc in docs:
            await self._look_at(doc, loads, now)
        present = {key_of(d) for d in docs}  # what deleted models left behind goes
        for state in (self.memory, self.reports, self.written, self._parsed):
            for key in [k for k in state if k not in present]:
                del state[key]

    def _handed_over(self, builtin: bool) -> None:
        if self._was_builtin is not None:
            log.info("autoscaler: %s now set the replicas of autoscaled models",
                     "the operator's built-in autoscaler" if builtin else "KEDA's ScaledObjects")
        self._was_builtin = builtin
        self.memory.clear()  # a new writer starts as if the count had just been set
        self.reports.clear()
        self.written.clear()
        for doc in self.caches.models():  # status, and the ScaledObjects KEDA now serves
            self.requeue(key_of(doc))

    def _model(self, doc: dict[str, Any]) -> tuple[LLMModel, Policy] | None:
        key, version = key_of(doc), doc["metadata"].get("resourceVersion", "")
        cached = self._parsed.get(key)
        if cached is None or cached[0] != version:
            try:
                model = parse_llmmodel(doc)
            except InvalidModel:
                return None  # the reconciler reports it
            cached = (version, model, Policy.of(
                model.spec.scaling, self.settings.builtin_autoscaler.stabilization_seconds))
            self._parsed[key] = cached
        _, model, policy = cached
        return (model, policy) if autoscaled(model) else None

    async def _look_at(self, doc: dict[str, Any], loads: Loads | str, now: float) -> None:
        key = key_of(doc)
        found = self._model(doc)
        kind, workload = next(((k, w) for k in SCALED_KINDS
                               if (w := self.caches.get(k, *key)) is not None), (None, None))
        if found is None or kind is None or workload is None \
                or doc["metadata"].get("deletionTimestamp"):
            self.memory.pop(key, None)
            return
        model, policy = found
        current = int((workload.get("spec") or {}).get("replicas", 1))
        written = self.written.get(key)
        if written is not None and written[0] != current and now - written[1] < WRITTEN_SECONDS:
            current = written[0]  # our write, not yet seen by the watch
        signal = loads.get(f"{key[0]}/{key[1]}") if not isinstance(loads, str) else None
        why = loads if isinstance(loads, str) else \
            "" if signal else "the router does not route this model (yet)"
        pending, waiting = signal if signal else (None, None)
        decision = step(policy, Observation(now, current, pending, waiting),
                        self.memory.get(key, Memory()))
        self.memory[key] = decision.memory
        report = report_after(self.reports.get(key), decision, current, why)
        if decision.changes and decision.replicas != current:
            await self._scale(model, kind, current, (decision.replicas, decision.reason), now)
            await record_events(self.kube, model, [Event(
                "Normal", "Scaled", f"{current} -> {decision.replicas} replica(s) "
                f"({decision.reason}): {decision.message}")])
            self.metrics.autoscaler_changes.labels(decision.reason).inc()
        if report != self.reports.get(key):
            self.reports[key] = report
            self.requeue(key)  # the reconciler writes the condition

    async def _scale(self, model: LLMModel, kind: tuple[str, str], current: int,
                     to: tuple[int, str], now: float) -> None:
        """Write the workload's scale subresource (Deployment or LeaderWorkerSet)."""
        replicas, reason = to
        path = (f"/apis/{kind[0]}/namespaces/{model.namespace}/{PLURALS[kind]}/"
                f"{model.name}/scale")
        await self.kube.request("PATCH", path, body={"spec": {"replicas": replicas}},
                                content_type="application/merge-patch+json",
                                params={"fieldManager": FIELD_MANAGER})
        self.written[(model.namespace, model.name)] = (replicas, now)
        log.info("%s/%s: %d -> %d replica(s) (%s)", model.namespace, model.name, current,
                 replicas, reason)

    # --- reading the router -----------------------------------------------------------------

    async def _read_router(self) -> Loads | str:
        router = self.settings.router
        if not router.enabled:
            return ("the router is off (operator setting router.enabled): the built-in "
                    "autoscaler reads the requests it holds and forwards")
        slices = self.caches.informers.get(ROUTER_SLICES_KIND, {}).get(router.namespace)
        urls = router_endpoints(list(slices.objects.values()) if slices else [],
                                router.port_name)
        if not urls:
            return f"Service {router.namespace}/{router.service} has no ready endpoint"
        assert self._http is not None
        answers = await asyncio.gather(*(self._scale_of(url) for url in urls))
        failed = [a for a in answers if isinstance(a, str)]
        if failed:  # a partial sum would look like a fall in load
            return failed[0]
        return combine([a for a in answers if not isinstance(a, str)])

    async def _scale_of(self, url: str) -> dict[str, Any] | str:
        assert self._http is not None
        try:
            async with self._http.get(f"{url}/scale") as r:
                if r.status != 200:
                    return f"router {url}: GET /scale answered {r.status}"
                answer: dict[str, Any] = await r.json()
                return answer
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return f"router {url}: {type(exc).__name__}: {exc}".rstrip(": ")
