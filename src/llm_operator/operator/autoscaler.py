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
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from llm_operator.api.pools import pool_autoscaled, pool_scaling, pools
from llm_operator.api.v1alpha1 import LLMModel, ScalingSpec
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
    Decision,
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
from llm_operator.render.pool_engine import pool_object_name
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


@dataclass
class Books:
    """What the autoscaler keeps per scaled workload of one key space (models, or pools)."""

    memory: dict[Key, Memory] = field(default_factory=dict)
    reports: dict[Key, Report] = field(default_factory=dict)
    written: dict[Key, tuple[int, float]] = field(default_factory=dict)  # (replicas, when)

    def current(self, key: Key, workload: dict[str, Any], now: float) -> int:
        """The workload's replicas: ours just written until the watch delivers them."""
        replicas = int((workload.get("spec") or {}).get("replicas", 1))
        written = self.written.get(key)
        if written is not None and written[0] != replicas and now - written[1] < WRITTEN_SECONDS:
            return written[0]
        return replicas

    def decide(self, key: Key, policy: Policy, observation: Observation, why: str
               ) -> tuple[Decision, Report]:
        """One step (remembered) and the condition after it."""
        decision = step(policy, observation, self.memory.get(key, Memory()))
        self.memory[key] = decision.memory
        return decision, report_after(self.reports.get(key), decision, observation.current,
                                      why)

    def keep(self, keys: set[Key]) -> None:
        for state in (self.memory, self.reports, self.written):
            for key in [k for k in state if k not in keys]:
                del state[key]

    def forget(self, key: Key) -> None:
        for state in (self.memory, self.reports, self.written):
            state.pop(key, None)

    def clear(self) -> None:
        self.keep(set())


class Autoscaler:
    """Sets autoscaled models' replicas from the router's counts when KEDA does not."""

    def __init__(self, kube: Kube, settings: Settings, caches: Caches, *,
                 requeue: Callable[[Key], None], metrics: OperatorMetrics,
                 read: ReadLoads | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.settings, self.caches = kube, settings, caches
        self.requeue, self.metrics, self.clock = requeue, metrics, clock
        self.read = read or self._read_router
        self.models = Books()  # by model; a pool's members' reports are their pool's
        self.pools = Books()  # by (namespace, pool name)
        self._parsed: dict[Key, tuple[str, LLMModel | None]] = {}  # by resourceVersion
        self._http: aiohttp.ClientSession | None = None
        self._was_builtin: bool | None = None

    # --- who scales ---------------------------------------------------------------------

    def builtin(self) -> bool:
        """The built-in autoscaler sets replicas now (else KEDA does, or should)."""
        mode = self.settings.autoscaler
        return mode == "builtin" or (mode == "auto" and not self.caches.serves(*KEDA_KIND))

    def report(self, model: LLMModel) -> Report | None:
        """The model's Scaling condition (None: its replicas are fixed, min == max).

        A pool's member reports its pool's (set whoever scales models).
        """
        if model.spec.pool is not None and not model.spec.is_remote:
            return self.models.reports.get((model.namespace, model.name))
        if not autoscaled(model):
            return None
        if self.builtin():
            return self.models.reports.get((model.namespace, model.name))
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
        """One look at every autoscaled model and pool: step, and write what changed.

        Pools are scaled here whoever scales models: KEDA's triggers cannot add several
        members' queues into one target for one Deployment.
        """
        builtin = self.builtin()
        if builtin != self._was_builtin:
            self._handed_over(builtin)
        docs = self.caches.models()
        groups = self._pools(docs)
        if builtin or groups:
            self.metrics.autoscaler_looks.inc()
            loads = await self.read()
            now = self.clock()
            for doc in docs if builtin else ():
                await self._look_at(doc, loads, now)
            for key, members in groups.items():
                await self._look_at_pool(key, members, loads, now)
        present = {key_of(d) for d in docs}  # what deleted models left behind goes
        self.models.keep(present)
        for key in [k for k in self._parsed if k not in present]:
            del self._parsed[key]
        self.pools.keep(set(groups))

    def _handed_over(self, builtin: bool) -> None:
        if self._was_builtin is not None:
            log.info("autoscaler: %s now set the replicas of autoscaled models",
                     "the operator's built-in autoscaler" if builtin else "KEDA's ScaledObjects")
        self._was_builtin = builtin
        self.models.clear()  # a new writer starts as if the count had just been set
        for doc in self.caches.models():  # status, and the ScaledObjects KEDA now serves
            self.requeue(key_of(doc))

    def _parse(self, doc: dict[str, Any]) -> LLMModel | None:
        """The model ``doc`` holds (None: one the CRD should have refused), parsed once."""
        key, version = key_of(doc), doc["metadata"].get("resourceVersion", "")
        cached = self._parsed.get(key)
        if cached is None or cached[0] != version:
            try:
                parsed: LLMModel | None = parse_llmmodel(doc)
            except InvalidModel:
                parsed = None  # the reconciler reports it
            cached = self._parsed[key] = (version, parsed)
        return cached[1]

    def _policy(self, scaling: ScalingSpec) -> Policy:
        return Policy.of(scaling, self.settings.builtin_autoscaler.stabilization_seconds)

    def _model(self, doc: dict[str, Any]) -> tuple[LLMModel, Policy] | None:
        model = self._parse(doc)
        if model is None or not autoscaled(model):
            return None
        return model, self._policy(model.spec.scaling)

    def _pools(self, docs: list[dict[str, Any]]) -> dict[Key, list[LLMModel]]:
        """Each pool with an engine Deployment, by (namespace, pool name): its members.

        Members being deleted are left out; a pool of one has no engine (its member is
        Failed), so it has no Deployment either.
        """
        models = [m for d in docs if not d["metadata"].get("deletionTimestamp")
                  and (m := self._parse(d)) is not None]
        return {key: members for key, members in pools(models).items()
                if self.caches.get(workloads.DEPLOYMENT_REF, key[0],
                                   pool_object_name(key[1])) is not None}

    async def _look_at(self, doc: dict[str, Any], loads: Loads | str, now: float) -> None:
        key = key_of(doc)
        found = self._model(doc)
        kind, workload = next(((k, w) for k in SCALED_KINDS
                               if (w := self.caches.get(k, *key)) is not None), (None, None))
        books = self.models
        if found is None or kind is None or workload is None \
                or doc["metadata"].get("deletionTimestamp"):
            books.memory.pop(key, None)
            return
        model, policy = found
        current = books.current(key, workload, now)
        signal = loads.get(f"{key[0]}/{key[1]}") if not isinstance(loads, str) else None
        why = loads if isinstance(loads, str) else \
            "" if signal else "the router does not route this model (yet)"
        pending, waiting = signal if signal else (None, None)
        decision, report = books.decide(key, policy, Observation(now, current, pending,
                                                                 waiting), why)
        if decision.changes and decision.replicas != current:
            await self._scale(kind, key, current, decision)
            books.written[key] = (decision.replicas, now)
            await record_events(self.kube, model, [Event(
                "Normal", "Scaled", f"{current} -> {decision.replicas} replica(s) "
                f"({decision.reason}): {decision.message}")])
        if report != books.reports.get(key):
            books.reports[key] = report
            self.requeue(key)  # the reconciler writes the condition

    async def _look_at_pool(self, key: Key, members: list[LLMModel], loads: Loads | str,
                            now: float) -> None:
        """One step for a pool's engine: its members' loads added, within their bounds."""
        namespace, pool = key
        books = self.pools
        if not pool_autoscaled(members):
            books.forget(key)
            for member in members:
                self.models.reports.pop((member.namespace, member.name), None)
            return
        name = pool_object_name(pool)
        workload = self.caches.get(workloads.DEPLOYMENT_REF, namespace, name)
        assert workload is not None  # _pools() kept pools with one
        current = books.current(key, workload, now)
        signals = [] if isinstance(loads, str) else [
            s for m in members if (s := loads.get(f"{namespace}/{m.name}"))]
        why = loads if isinstance(loads, str) else \
            "" if signals else "the router does not route this pool's members (yet)"
        # each member's requests are the pool's; its engine's queue is one, seen by each
        pending = sum(s[0] for s in signals) if signals else None
        waiting = max(s[1] for s in signals) if signals else None
        decision, report = books.decide(key, self._policy(pool_scaling(members)),
                                        Observation(now, current, pending, waiting), why)
        if not report.message.startswith("pool "):  # a new one (else the one kept)
            report = Report(report.active, report.reason, f"pool {pool}: {report.message}")
        if decision.changes and decision.replicas != current:
            await self._scale(workloads.DEPLOYMENT_REF, (namespace, name), current, decision)
            books.written[key] = (decision.replicas, now)
            for member in members:
                await record_events(self.kube, member, [Event(
                    "Normal", "Scaled", f"pool {pool}: {current} -> {decision.replicas} "
                    f"replica(s) ({decision.reason}): {decision.message}")])
        books.reports[key] = report
        for member in members:
            member_key = (member.namespace, member.name)
            if self.models.reports.get(member_key) != report:
                self.models.reports[member_key] = report
                self.requeue(member_key)  # the reconciler writes the condition

    async def _scale(self, kind: tuple[str, str], target: Key, current: int,
                     decision: Decision) -> None:
        """Write a workload's scale subresource (Deployment or LeaderWorkerSet)."""
        namespace, name = target
        path = f"/apis/{kind[0]}/namespaces/{namespace}/{PLURALS[kind]}/{name}/scale"
        await self.kube.request("PATCH", path, body={"spec": {"replicas": decision.replicas}},
                                content_type="application/merge-patch+json",
                                params={"fieldManager": FIELD_MANAGER})
        self.metrics.autoscaler_changes.labels(decision.reason).inc()
        log.info("%s/%s: %d -> %d replica(s) (%s)", namespace, name, current,
                 decision.replicas, decision.reason)

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
