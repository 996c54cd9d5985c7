"""Running the operator: leader election, the liveness endpoint, metrics, the controller."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from urllib.parse import urlsplit

import aiohttp.web

from llm_operator.informer import Key
from llm_operator.kube import Connection, Kube
from llm_operator.leader import LeaderElector, LeaseTerms
from llm_operator.operator.controller import Controller
from llm_operator.operator.metrics import OperatorMetrics
from llm_operator.operator.reconciler import Outcome
from llm_operator.profiles.settings import Settings

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def _probe(liveness: str | None, status: dict[str, str]) -> AsyncIterator[None]:
    """Answer the liveness URL with ``status`` (200): "standby" while waiting, then "ok"."""
    if not liveness:
        yield None
        return
    url = urlsplit(liveness)
    app = aiohttp.web.Application()

    async def answer(_: aiohttp.web.Request) -> aiohttp.web.Response:
        return aiohttp.web.json_response(status)

    app.router.add_get(url.path or "/", answer)
    runner = aiohttp.web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await aiohttp.web.TCPSite(runner, url.hostname, url.port or 80).start()
        yield None
    finally:
        await runner.cleanup()


async def run_operator(conn: Connection, settings: Settings, *,
                       namespaces: Collection[str] = (), resync_seconds: float = 60.0,
                       workers: int = 4, liveness: str | None = None,
                       metrics_port: int | None = None, metrics: OperatorMetrics | None = None,
                       stop: asyncio.Event | None = None, ready: asyncio.Event | None = None,
                       leader: LeaseTerms | None = None,
                       on_reconcile: Callable[[Key, Outcome], None] | None = None) -> None:
    """Run the operator until ``stop`` is set (or forever); ``namespaces`` empty: all.

    With ``leader``, it first waits to hold that Lease, renews it while it works, and
    releases it on a clean stop. A leader that loses the Lease (taken, or not renewed within
    the renew deadline: a frozen or unreachable API server) stops its controller at once
    and stands by again in the same process: no restart, and a fresh controller (fresh
    caches) if it leads again.
    """
    stop = stop or asyncio.Event()
    status = {"status": "standby" if leader else "starting"}
    metrics = metrics or OperatorMetrics()
    async with Kube(conn) as kube, _probe(liveness, status):
        if metrics_port is not None:
            metrics.serve(metrics_port)
        while True:
            elector = LeaderElector(kube, leader) if leader is not None else None
            if elector is not None and not await _until_first(elector.acquire(), stop):
                return  # asked to stop while standing by
            status["status"] = "ok"
            controller = Controller(kube, settings, namespaces=namespaces,
                                    resync_seconds=resync_seconds, workers=workers,
                                    metrics=metrics, on_reconcile=on_reconcile)
            holding = asyncio.ensure_future(elector.hold()) if elector else None
            lost = elector.lost if elector else asyncio.Event()
            try:
                await _until_first(controller.run(ready), stop, lost)
            finally:
                if holding is not None:
                    holding.cancel()
                    await asyncio.gather(holding, return_exceptions=True)
                if elector is not None and not elector.lost.is_set():
                    await elector.release()
            if not lost.is_set():
                return
            status["status"] = "standby"
            log.warning("stepped down: the Lease was lost; the controller is stopped and this "
                        "replica stands by again")


async def _until_first(work: Awaitable[None], *events: asyncio.Event) -> bool:
    """Run ``work`` until it ends or one of ``events`` is set; True when the work finished."""
    task = asyncio.ensure_future(work)
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait({task, *waits}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()
            return True
        return False
    finally:
        for future in (task, *waits):
            future.cancel()
        await asyncio.gather(task, *waits, return_exceptions=True)
