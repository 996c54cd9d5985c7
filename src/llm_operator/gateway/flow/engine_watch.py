"""Looks at the engines of busy models (their /metrics) every few hundredths of a second.

What a look is for is the caller's to say (routing/looks.py's ``Looks.looked``): each
replica's engine queue (flow/saturation.py) and, on the router, whether a band with
``idleSeconds`` may run; on the router, with a sweep, every engine's load now and then, for
picking. This module only asks: which pools, which engines, one GET each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import NamedTuple

import aiohttp

from llm_operator.gateway.flow.engine_metrics import engine_report
from llm_operator.gateway.flow.saturation import EngineReport

log = logging.getLogger("llm_operator.gateway")
Reports = dict[str, EngineReport | None]  # base URL -> what its engine said (None: nothing)


async def look(http: aiohttp.ClientSession, base_url: str) -> EngineReport | None:
    """What the engine at ``base_url`` (an OpenAI base, ``/v1``) reports; None: no answer."""
    url = base_url.removesuffix("/v1") + "/metrics"
    try:
        async with http.get(url) as r:
            if r.status != 200:
                return None
            return engine_report(await r.text())
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None  # a replica going away, or an engine without metrics


class Sweep(NamedTuple):
    """Every engine, now and then, for its load alone (the router's picking)."""

    engines: Callable[[], list[str]]
    loaded: Callable[[str, EngineReport], None]
    seconds: float


class EngineWatch:
    """Every ``every`` seconds: the engines of ``pools()``, each pool's reported at once.

    With a ``sweep``, also every engine, every ``sweep.seconds``, for its load alone: one
    watch reads every engine a process needs, however many of its parts use the reports.
    The sweep runs beside the looks, so an engine slow to answer it never delays them.
    """

    def __init__(self, pools: Callable[[], list[str]], engines: Callable[[str], list[str]],
                 looked: Callable[[str, Reports], None], every: Callable[[], float],
                 sweep: Sweep | None = None) -> None:
        self.pools, self.engines, self.looked, self.every = pools, engines, looked, every
        self.sweep = sweep

    async def run(self) -> None:
        """Until cancelled."""
        sweeping = None if self.sweep is None else asyncio.create_task(
            self._sweep(self.sweep))
        try:
            await self._look()
        finally:
            if sweeping is not None:
                sweeping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeping

    async def _look(self) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, self.every() * 10))
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                try:
                    for pool in self.pools():
                        urls = self.engines(pool)
                        reports = await asyncio.gather(*(look(http, url) for url in urls))
                        self.looked(pool, dict(zip(urls, reports, strict=True)))
                except Exception:  # a defect: say so, and look again (dispatch never waits)
                    log.exception("looking at the engines failed")
                await asyncio.sleep(self.every())

    async def _sweep(self, sweep: Sweep) -> None:
        timeout = aiohttp.ClientTimeout(total=max(1.0, sweep.seconds))
        async with aiohttp.ClientSession(timeout=timeout) as http:
            while True:
                try:
                    urls = sweep.engines()
                    reports = await asyncio.gather(*(look(http, url) for url in urls))
                    for url, report in zip(urls, reports, strict=True):
                        if report is not None:  # else a replica going away
                            sweep.loaded(url, report)
                except Exception:  # a defect: say so, and sweep again
                    log.exception("sweeping the engines failed")
                await asyncio.sleep(sweep.seconds)
