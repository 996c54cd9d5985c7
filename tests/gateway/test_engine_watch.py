"""One loop reads every engine a process needs: busy pools often, every engine now and then.

Two fake engines on loopback answer /metrics as llama-server does. The watch looks at the
busy pool's engine for flow control, and its sweep reads the other for its load alone (the
router's picking), in the same loop: the router no longer scrapes the engines a second time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from llm_operator.gateway.flow.engine_watch import EngineWatch, Reports, Sweep
from llm_operator.gateway.flow.saturation import EngineReport


@contextlib.asynccontextmanager
async def engines(*waiting: int) -> AsyncIterator[list[str]]:
    """Engines reporting ``waiting`` requests each: their OpenAI base URLs."""
    runners, urls = [], []
    for count in waiting:
        async def metrics(_: web.Request, count: int = count) -> web.Response:
            return web.Response(text=f"llamacpp:requests_deferred {count}\n"
                                     "llamacpp:requests_processing 1\n")
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
    try:
        yield urls
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_the_sweep_reads_the_engines_the_busy_pools_looks_left_out() -> None:
    async with engines(3, 5) as (busy, idle):
        looked: list[Reports] = []
        loaded: dict[str, EngineReport] = {}
        seen = asyncio.Event()

        def record(url: str, report: EngineReport) -> None:
            loaded[url] = report
            seen.set()

        watch = EngineWatch(lambda: ["gemma"], lambda _: [busy],
                            lambda _, reports: looked.append(reports), lambda: 0.01,
                            Sweep(lambda: [busy, idle], record, 60.0))
        task = asyncio.create_task(watch.run())
        try:
            async with asyncio.timeout(10):
                await seen.wait()
                while len(looked) < 3:  # the busy pool keeps being looked at
                    await asyncio.sleep(0.01)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert looked[0][busy] is not None and looked[0][busy].waiting == 3
    assert list(loaded) == [idle] and loaded[idle].waiting == 5  # once: every 60 s
