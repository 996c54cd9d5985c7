"""Run the operator in-process for a test, and address the emulator as a client would."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from llm_operator.kube import Connection
from llm_operator.operator.run import run_operator
from llm_operator.profiles.settings import Settings

from cluster import Cluster


def connect(cluster: Cluster) -> Connection:
    return Connection(server=str(cluster.url).rstrip("/"))


@contextlib.asynccontextmanager
async def running_operator(conn: Connection, settings: Settings | None = None, *,
                           timeout: float = 10, **options: Any) -> AsyncIterator[None]:
    """The operator until the block ends (stopped cleanly); no resync unless asked."""
    stop, ready = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(run_operator(
        conn, settings or Settings(), stop=stop, ready=ready,
        **{"resync_seconds": 3600, **options}))
    await asyncio.wait_for(ready.wait(), timeout)
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(task, timeout)
