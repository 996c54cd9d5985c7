"""The router's process: watch models and endpoints, scrape engines, serve the gateway."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge

from llm_operator.access.keyring import Keyring
from llm_operator.access.keystore import FileKeyStore, KeyStore
from llm_operator.access.oidc import OidcSettings
from llm_operator.api import labels as L
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.batch.runner import BatchRunner
from llm_operator.console.key_admin import KeyAdmin
from llm_operator.console.oidc_sign_in import OidcSignIn
from llm_operator.console.pages import Console
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.routing.owners import PEER_HEADER, Owners
from llm_operator.gateway.server.batches import own_address
from llm_operator.gateway.server.endpoints import answering_errors
from llm_operator.gateway.server.http import served
from llm_operator.gateway.settings.config import parse_config
from llm_operator.informer import Informer, Key
from llm_operator.kube import Kube
from llm_operator.leader import LeaderElector, LeaseTerms
from llm_operator.router.console_models import ClusterModels, key_viewer
from llm_operator.router.keys_secret import SecretKeyStore
from llm_operator.router.routes import (
    SERVICE_NAME_LABEL,
    Options,
    Table,
    build,
    in_cluster,
    ready_endpoints,
    service_of,
)

log = logging.getLogger("llm_operator.router")
MODELS = ("ai.example.io/v1alpha1", "llmmodels")
SLICES = ("discovery.k8s.io/v1", "endpointslices")
# The Gateway API Inference Extension's objectives: x-gateway-inference-objective names one,
# its priority selects a flow-control band (watched where the CRD is served).
OBJECTIVES = ("inference.networking.x-k8s.io/v1alpha2", "inferenceobjectives")
class Router:
    """LLMModels and their EndpointSlices, in ``namespaces`` (empty: all), as one gateway.

    Every change rebuilds the table (router.routes.build) and reconfigures the gateway:
    requests held for a model that had no replica go out as soon as one is ready. The
    engines' queues are scraped every ``scrape_seconds`` for least-load and bounded
    prefix routing, and every ``watch_seconds`` (the gateway's engine watch) those of a
    model with requests waiting or every slot taken (each replica's engine queue adapts,
    flowControl.saturation) or where a band with ``idleSeconds`` waits: requests another
    replica sent keep that band waiting too.
    ``settings`` are the gateway's own (``clientKeys``, ``redis``): every
    route is behind them. ConfigError if they are invalid.
    """

    def __init__(self, kube: Kube, namespaces: Collection[str] = (), *,
                 options: Options | None = None, scrape_seconds: float = 2.0,
                 watch_seconds: float = 0.1,
                 max_held_per_route: int = 100, max_held: int = 1000,
                 settings: Mapping[str, Any] | None = None,
                 peers: tuple[str, str] | None = None, port: int = 8080,
                 batch_lease: LeaseTerms | None = None, identity: str | None = None,
                 admin_token: Callable[[str | None], bool] | None = None,
                 keys_secret: tuple[str, str] | None = None,
                 oidc: OidcSettings | None = None) -> None:
        self.kube, self.scrape_seconds = kube, scrape_seconds
        self.watch_seconds = watch_seconds
        self.options = options or Options()
        self.base = {**(settings or {}), "maxHeldPerRoute": max_held_per_route,
                     "maxHeld": max_held}
        # with its Service's replicas: each model's queue on one of them (gateway/routing/owners.py)
        self.owners = None if peers is None else Owners(
            identity or os.environ.get("HOSTNAME") or socket.gethostname())
        self.gateway = Gateway(parse_config({"routes": [], **self.base}, empty_ok=True),
                               component="router", owners=self.owners)
        # its looks: peers send to the same engines, and a band with idleSeconds waits
        # for a look that finds none of their requests
        self.gateway.flow.look_every = watch_seconds
        # and every engine's load, for picking, in the same loop (flow/engine_watch.py)
        self.gateway.looks.sweep_seconds = scrape_seconds
        # the Batch API (settings batch.enabled): every replica answers it from Redis; the
        # one holding ``batch_lease`` runs the batches, through itself
        self.gateway.serve_batches(lambda: own_address("127.0.0.1", port),
                                        autostart=False)
        self.batch_lease = batch_lease
        self.table = Table()
        self.synced = asyncio.Event()
        self.rebuilt = asyncio.Event()  # set after every rebuild (tests wait on it)
        self._dirty = asyncio.Event()
        where: list[str | None] = [*namespaces] or [None]
        self.model_informers = [Informer(kube, *MODELS, namespace=ns, on_change=self._changed)
                                for ns in where]
        self.slice_informers = [Informer(kube, *SLICES, namespace=ns, on_change=self._changed,
                                         label_selector=f"{L.K8S_MANAGED_BY}="
                                         f"{L.MANAGED_BY_VALUE}")
                                for ns in where]
        self.objective_informers = [Informer(kube, *OBJECTIVES, namespace=ns,
                                             on_change=self._changed) for ns in where]
        # the router's own Service: its ready replicas, each owning some models' queues
        self.peer_informers = [] if peers is None else [Informer(
            kube, *SLICES, namespace=peers[0], on_change=self._changed,
            label_selector=f"{SERVICE_NAME_LABEL}={peers[1]}")]
        # the web console at /ui/: a client key to look where the gateway asks for keys
        self.console = Console(
            ClusterModels(lambda: [o for i in self.model_informers
                                   for o in i.objects.values()], lambda: self.table.labels,
                          lambda: self.table.names),
            self.gateway.metrics.registry, gateway_url=lambda: "", where="llmop router",
            viewer=key_viewer(lambda: None if self.gateway.gate is None
                              else self.gateway.gate.source.current()),
            batches=self.gateway.batches_of,
            key_admin=self._key_admin(admin_token, keys_secret, oidc),
            slots=self.gateway.route_slots,
            oidc=None if oidc is None else OidcSignIn(oidc))
        self.pending = pending_requests(self.gateway.metrics.registry)
        self.gateway.before_scrape.append(self._export_pending)
        self._session: aiohttp.ClientSession | None = None  # asks the owners' /scale

    def _key_admin(self, token: Callable[[str | None], bool] | None,
                   secret: tuple[str, str] | None, oidc: OidcSettings | None
                   ) -> KeyAdmin | None:
        """The console's key administration, where there is an administrator.

        An administrator signs in with the admin token or as an --oidc-admin; changed keys
        go to ``secret``, else the keys file.
        """
        gate = self.gateway.gate
        if gate is None or (token is None and (oidc is None or not oidc.admins)):
            return None
        if token is None:
            def token(_: str | None) -> bool:  # administrators sign in at the issuer only
                return False
        store: KeyStore = FileKeyStore(gate.source.path) if secret is None else \
            SecretKeyStore(self.kube, *secret)
        return KeyAdmin(token, store, self._apply_keys)

    def _apply_keys(self, keyring: Keyring) -> None:
        if self.gateway.gate is not None:
            self.gateway.gate.source.apply(keyring)

    def _changed(self, *_: Any) -> None:
        self._dirty.set()

    def rebuild(self) -> None:
        models = []
        for informer in self.model_informers:
            for (namespace, name), obj in informer.objects.items():
                try:
                    models.append(parse_llmmodel(obj))
                except InvalidModel as exc:
                    log.warning("LLMModel %s/%s is invalid, not routed: %s", namespace, name,
                                exc)
        slices: dict[Key, list[dict[str, Any]]] = {}
        for informer in self.slice_informers:
            for (namespace, _), piece in informer.objects.items():
                service = ((piece.get("metadata") or {}).get("labels") or {}).get(
                    SERVICE_NAME_LABEL)
                if service:
                    slices.setdefault((namespace, service), []).append(piece)
        table = build(((m, in_cluster(m, slices.get((m.namespace, service_of(m)), [])))
                       for m in models), self.options)
        if self.owners is not None and self.peer_informers:
            self.owners.update({name: url.removesuffix("/v1") for name, url in ready_endpoints(
                list(self.peer_informers[0].objects.values()))})
        self.gateway.set_routes(table.routes)
        self.gateway.set_absent(table.absent)
        self.gateway.objectives = self._objectives()
        self.table = table
        self.rebuilt.set()

    def _objectives(self) -> dict[str, int]:
        """InferenceObjective names and their priorities (unset: 0, as GIE reads it).

        A name in several namespaces: the first namespace's, in name order.
        """
        found: dict[str, int] = {}
        for informer in self.objective_informers:
            for (_, name), obj in sorted(informer.objects.items()):
                priority = (obj.get("spec") or {}).get("priority")
                found.setdefault(name, priority if isinstance(priority, int) else 0)
        return found

    def load_of(self, namespace: str, name: str) -> dict[str, int] | None:
        """What autoscalers read of a model (None: unknown).

        Requests held (no replica yet), queued by flow control (every slot busy), in
        flight, and the engines' own queues; ``pending`` adds up the router's three.
        """
        key = (namespace, name)
        if key not in self.table.labels:
            return None
        labels = self.table.labels[key]
        held = sum(self.gateway.holds.held.get(label, 0) for label in labels)
        queued = self.gateway.flow.queued(labels[0])  # its routes share the model's pool
        in_flight = sum(self.gateway.in_flight(url) for url in self.table.upstreams[key])
        waiting = sum(self.gateway.engine_waiting(url) for url in self.table.upstreams[key])
        return {"pending": held + queued + in_flight, "held": held, "queued": queued,
                "inFlight": in_flight, "waiting": round(waiting)}

    def _export_pending(self) -> None:
        self.pending.clear()
        for namespace, name in self.table.labels:
            load = self.load_of(namespace, name)
            if load is not None:
                self.pending.labels(namespace, name).set(load["pending"])

    async def scale(self, request: web.Request) -> web.Response:
        """GET /scale/{namespace}/{name}: the model's load for KEDA's metrics-api trigger.

        From the replica holding the model's queue (KEDA asks the router's Service, which
        may send it to any replica); this one's own when that one does not answer.
        """
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        labels = self.table.labels.get((namespace, name))
        owner = None if self.owners is None or not labels \
            or not self.gateway.flow.controls(labels[0]) else self.owners.passes_to(
                labels[0], request.remote, request.headers.get(PEER_HEADER))
        if owner is not None:
            assert self.owners is not None
            try:
                async with self._http().get(f"{owner}/scale/{namespace}/{name}",
                                            headers={PEER_HEADER: self.owners.me}) as answer:
                    if answer.status == 200:
                        return web.json_response(await answer.json())
            except (TimeoutError, aiohttp.ClientError, ValueError) as exc:
                log.debug("GET /scale from %s: %s", owner, type(exc).__name__)
        load = self.load_of(namespace, name)
        if load is None:
            return web.json_response({"error": f"no model {namespace}/{name} is routed here",
                                      "pending": 0}, status=404)
        return web.json_response(load)

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        return self._session

    async def scale_all(self, _: web.Request) -> web.Response:
        """GET /scale: every routed model's load in one answer (the built-in autoscaler's)."""
        loads = {f"{namespace}/{name}": load for namespace, name in sorted(self.table.labels)
                 if (load := self.load_of(namespace, name)) is not None}
        return web.json_response({"models": loads})

    def app(self) -> web.Application:
        def more(router: web.UrlDispatcher) -> None:
            router.add_get("/scale", answering_errors(self.scale_all))
            router.add_get("/scale/{namespace}/{name}", answering_errors(self.scale))
            self.console.add_routes(router)

        async def close_console(_: web.Application) -> None:
            await self.console.close()

        app = self.gateway.app(more)
        app.on_cleanup.append(close_console)
        return app

    async def run(self) -> None:
        """Watch, rebuild on every change; until cancelled (the gateway looks at the engines)."""
        informers = [*self.model_informers, *self.slice_informers]
        tasks = [asyncio.create_task(i.run())
                 for i in [*informers, *self.objective_informers, *self.peer_informers]]
        if self.gateway.batch_runner is not None:
            tasks.append(asyncio.create_task(self._run_batches(self.gateway.batch_runner)))
        try:  # objectives are optional (their CRD, the router's RBAC): not waited for
            await asyncio.gather(*(i.synced.wait() for i in informers))
            while True:
                self._dirty.clear()
                self.rebuild()
                self.synced.set()
                await self._dirty.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._session is not None:
                await self._session.close()

    async def _run_batches(self, runner: BatchRunner) -> None:
        """The batch runner, on the replica that holds the batch Lease, while it holds it."""
        if self.batch_lease is None:  # one replica: it runs them
            await runner.run()
            return
        elector = LeaderElector(self.kube, self.batch_lease)
        while True:
            await elector.acquire()
            elector.lost.clear()
            log.info("running batches (Lease %s/%s)", self.batch_lease.namespace,
                     self.batch_lease.name)
            work = asyncio.create_task(runner.run())
            holding = asyncio.create_task(elector.hold())
            try:
                await asyncio.wait({work, holding}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (work, holding):
                    task.cancel()
                await asyncio.gather(work, holding, return_exceptions=True)
                if not holding.done() or holding.cancelled():  # stopping: hand it over
                    with contextlib.suppress(Exception):
                        await asyncio.shield(elector.release())
            if not work.cancelled() and work.exception() is not None:
                log.error("the batch runner failed (%s); starting it again",
                          work.exception())
                await asyncio.sleep(self.batch_lease.retry)


def pending_requests(registry: CollectorRegistry) -> Gauge:
    """The router's own series beside the gateway's: what KEDA scales each model on."""
    return Gauge("llmop_router_pending_requests", "Requests for a model held, queued or in "
                 "flight: what KEDA scales on (GET /scale/<ns>/<name>).",
                 ["namespace", "model"], registry=registry)


async def serve(router: Router, host: str, port: int, ready: asyncio.Event | None = None,
                stop: asyncio.Event | None = None, *, drain_seconds: float = 320.0) -> None:
    """Run ``router`` and, once its table is built, its HTTP server; until ``stop``.

    Then requests in flight get ``drain_seconds`` to finish before they are cancelled.
    """
    async with served(router.app(), drain_seconds) as listen:
        watching = asyncio.create_task(router.run())
        try:
            # Listen once the table is built: a probe then means every model is routed, and
            # no request meets an empty table (a 404 for a model that exists).
            await router.synced.wait()
            await listen(host, port)
            log.info("router listening on %s:%d with %d route(s)", host, port,
                     len(router.table.routes))
            if ready is not None:
                ready.set()
            await (stop or asyncio.Event()).wait()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
