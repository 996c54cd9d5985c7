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


class RedisServer:
    """One redis-server process on a fixed loopback port, which may be stopped and started
    again (on the same port and directory: with ``appendonly`` it keeps its data)."""

    def __init__(self, workdir: Path, *, appendonly: bool = False) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is missing: make tools installs it (Debian)")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._argv = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "yes" if appendonly else "no", "--dir", str(workdir),
                      "--logfile", str(workdir / "redis.log")]
        self._proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        """Start it and wait until it answers (an append-only file loaded)."""
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.STDOUT)
        client = aioredis.from_url(self.url)
        try:
            async with asyncio.timeout(READY_WITHIN):
                while True:  # the server accepts connections once it has started
                    with contextlib.suppress(OSError, aioredis.ConnectionError):
                        if await client.ping():
                            return
                    await asyncio.sleep(0.02)
        finally:
            await client.aclose()

    def stop(self) -> None:
        """SIGTERM, as Kubernetes stops a pod: Redis writes its append-only file and exits."""
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)
            self._proc = None


@contextlib.asynccontextmanager
async def redis_server(workdir: Path) -> AsyncIterator[str]:
    """Its URL while it runs; stops exactly the process it started."""
    server = RedisServer(workdir)
    try:
        await server.start()
        yield server.url
    finally:
        server.stop()
