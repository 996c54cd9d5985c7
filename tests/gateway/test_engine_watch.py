"""One watch reads every engine a process needs: busy pools often, every engine now and then.

Fake engines on loopback answer /metrics as llama-server does (or never). The watch looks
at the busy pool's engine for flow control, and its sweep reads every engine for its load
alone (the router's picking), beside the looks: the router no longer scrapes the engines
in a loop of its own, and an engine slow to answer the sweep never delays a look.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from llm_operator.gateway.flow.engine_watch import EngineWatch, Reports, Sweep
from llm_operator.gateway.flow.saturation import EngineReport


@contextlib.asynccontextmanager
async def engines(*waiting: int | None) -> AsyncIterator[list[str]]:
    """Engines reporting ``waiting`` requests each (None: one that never answers)."""
    runners, urls = [], []
    never = asyncio.Event()
    for count in waiting:
        async def metrics(_: web.Request, count: int | None = count) -> web.Response:
            if count is None:
                await never.wait()
            return web.Response(text=f"llamacpp:requests_deferred {count}\n"
                                     "llamacpp:requests_processing 1\n")
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, shutdown_timeout=0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        urls.append(f"http://127.0.0.1:{runner.addresses[0][1]}/v1")
    try:
        yield urls
    finally:
        never.set()
        for runner in runners:
            await runner.cleanup()


async def _watching(watch: EngineWatch, done: asyncio.Event) -> None:
    task = asyncio.create_task(watch.run())
    try:
        async with asyncio.timeout(10):
            await done.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_sweep_reads_every_engine_for_its_load_once_a_period() -> None:
    async with engines(3, 5) as (busy, idle):
        looked: list[Reports] = []
        loaded: dict[str, list[EngineReport]] = {}
        both = asyncio.Event()

        def record(url: str, report: EngineReport) -> None:
            loaded.setdefault(url, []).append(report)
            if len(loaded) == 2 and len(looked) >= 3:
                both.set()

        def look(_: str, reports: Reports) -> None:
            looked.append(reports)
            if len(loaded) == 2 and len(looked) >= 3:
                both.set()

        await _watching(EngineWatch(lambda: ["gemma"], lambda _: [busy], look, lambda: 0.01,
                                    Sweep(lambda: [busy, idle], record, 60.0)), both)
    assert looked[0][busy] is not None and looked[0][busy].waiting == 3
    assert [r.waiting for r in loaded[idle]] == [5]  # once: every 60 s
    assert [r.waiting for r in loaded[busy]] == [3]


async def test_an_engine_that_never_answers_the_sweep_does_not_delay_the_looks() -> None:
    async with engines(3, None) as (busy, silent):
        looked: list[Reports] = []
        enough = asyncio.Event()

        def look(_: str, reports: Reports) -> None:
            looked.append(reports)
            if len(looked) >= 20:
                enough.set()

        loop = asyncio.get_running_loop()
        started = loop.time()
        await _watching(EngineWatch(lambda: ["gemma"], lambda _: [busy], look, lambda: 0.01,
                                    Sweep(lambda: [busy, silent], lambda *_: None, 0.05)),
                        enough)
        took = loop.time() - started
    # 20 looks 10 ms apart while each sweep waits on the silent engine (a second each)
    assert took < 5, f"20 looks took {took:.1f} s beside a sweep that hangs"
