"""`llmop up --register`: publish this machine's models into a cluster and keep them fresh.

The objects come from render/registration.py; this applies them, renews the Lease every
few seconds, removes what is no longer served, and withdraws everything on stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api import labels as L
from llm_operator.api.v1alpha1 import API_VERSION, LLMModel
from llm_operator.kube import ApiError, Connection, Kube
from llm_operator.render.registration import (
    RENEW_SECONDS,
    key_secret,
    lease_object,
    registered_model,
)

log = logging.getLogger("llm_operator.local")
FIELD_MANAGER = "llmop-up"


@dataclass(frozen=True)
class Registration:
    """Where to publish: the cluster, the namespace, and how the cluster reaches us."""

    connection: Connection
    namespace: str
    advertise: str  # host or IP the cluster's pods reach this machine's gateway at
    machine: str  # the Lease's (and key Secret's) name, llmop-up-<host>
    renew_seconds: float = RENEW_SECONDS


@dataclass
class Registrar:
    """What this machine has published, kept in line with what it serves."""

    kube: Kube
    registration: Registration
    gateway_port: int
    published: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> applied
    problems: dict[str, str] = field(default_factory=dict)  # name -> why not published
    renewed: asyncio.Event = field(default_factory=asyncio.Event)  # set at each renewal

    @property
    def _selector(self) -> str:
        return f"{L.REGISTERED_BY}={self.registration.machine}"

    async def _apply(self, obj: dict[str, Any]) -> None:
        await self.kube.apply(obj, field_manager=FIELD_MANAGER)

    async def heartbeat(self) -> None:
        """Renew the Lease (creating it and the key Secret the first time)."""
        reg = self.registration
        now = datetime.datetime.now(tz=datetime.UTC)
        await self._apply(lease_object(reg.namespace, reg.machine, reg.machine, now))
        if not self.published and not self.problems:
            await self._apply(key_secret(reg.namespace, reg.machine))
        self.renewed.set()

    async def sync(self, serving: list[LLMModel]) -> None:
        """Publish the models served now; withdraw the ones no longer served."""
        reg = self.registration
        base_url = f"http://{reg.advertise}:{self.gateway_port}/v1"
        wanted = {m.name: registered_model(m, namespace=reg.namespace, base_url=base_url,
                                           lease=reg.machine) for m in serving}
        for name, doc in wanted.items():
            if self.published.get(name) == doc:
                continue
            existing = await self.kube.get(API_VERSION, "llmmodels", reg.namespace, name)
            owner = ((existing or {}).get("metadata", {}).get("labels") or {}).get(
                L.REGISTERED_BY)
            if existing is not None and owner != reg.machine:
                if name not in self.problems:
                    log.warning("not registering %s: the cluster has an LLMModel %s/%s of "
                                "its own", name, reg.namespace, name)
                self.problems[name] = (f"the cluster already has an LLMModel "
                                       f"{reg.namespace}/{name}: not registered")
                continue
            await self._apply(doc)
            self.published[name] = doc
            self.problems.pop(name, None)
            log.info("registered %s in %s as %s", name, reg.namespace, base_url)
        for name in [n for n in self.published if n not in wanted]:
            await self._delete(name)

    async def _delete(self, name: str) -> None:
        await self.kube.delete(API_VERSION, "llmmodels", self.registration.namespace, name)
        self.published.pop(name, None)
        log.info("withdrew %s", name)

    async def withdraw(self) -> None:
        """Remove everything this machine published (on stop)."""
        reg = self.registration
        for doc in await self.kube.list(API_VERSION, "llmmodels", reg.namespace,
                                        label_selector=self._selector):
            await self._delete(doc["metadata"]["name"])
        for api, plural in (("v1", "secrets"), ("coordination.k8s.io/v1", "leases")):
            await self.kube.delete(api, plural, reg.namespace, reg.machine)


@contextlib.asynccontextmanager
async def registered(registration: Registration, gateway_port: int,
                     serving: Callable[[], list[LLMModel]], changed: Callable[[], None]
                     ) -> AsyncIterator[Registrar]:
    """Publish what ``serving()`` returns, heartbeat, and on the way out withdraw.

    ``changed`` is called when what is published (or why a model is not) changes.
    """
    async with Kube(registration.connection, attempts=2) as kube:
        registrar = Registrar(kube, registration, gateway_port)
        task = asyncio.create_task(_keep(registrar, serving, changed))
        try:
            yield registrar
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            try:
                async with asyncio.timeout(10):
                    await registrar.withdraw()
            except (ApiError, OSError, TimeoutError) as exc:
                log.warning("could not withdraw the registered models: %s (the "
                            "operator withdraws them once the Lease lapses)", exc)


async def _keep(registrar: Registrar, serving: Callable[[], list[LLMModel]],
                changed: Callable[[], None]) -> None:
    """Renew the Lease every renew_seconds, and sync the published models every second."""
    renewed = 0.0
    while True:
        before = (sorted(registrar.published), dict(registrar.problems))
        try:
            if time.monotonic() - renewed >= registrar.registration.renew_seconds:
                await registrar.heartbeat()
                renewed = time.monotonic()
            await registrar.sync(serving())
        except (ApiError, OSError) as exc:
            log.warning("registering in the cluster failed: %s; trying again", exc)
        if (sorted(registrar.published), dict(registrar.problems)) != before:
            changed()
        await asyncio.sleep(min(1.0, registrar.registration.renew_seconds))
