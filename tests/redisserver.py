"""A real redis-server (Debian's) on a free loopback port, for the gateway's shared limits."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import redis.asyncio as aioredis

READY_WITHIN = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def redis_server(workdir: Path) -> AsyncIterator[str]:
    """Its URL while it runs; stops exactly the process it started."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is missing: make tools installs it (Debian)")
    port = free_port()
    log = workdir / "redis.log"
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(workdir), "--logfile",
                             str(log)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"redis://127.0.0.1:{port}/0"
    client = aioredis.from_url(url)
    try:
        async with asyncio.timeout(READY_WITHIN):
            while True:  # the server accepts connections once it has started
                with contextlib.suppress(OSError, aioredis.ConnectionError):
                    if await client.ping():
                        break
                await asyncio.sleep(0.02)
        yield url
    finally:
        await client.aclose()
        proc.terminate()
        proc.wait(10)
