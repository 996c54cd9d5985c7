"""A TCP proxy that can freeze as a server whose host vanished: bytes go in, nothing comes back.

A SIGSTOPped kube-apiserver, or a Redis pod deleted without its connections being closed
(its address gone from the network): connections are still accepted and requests sent, but
nothing answers until the proxy thaws, and nothing fails: a client without a timeout hangs.
"""

from __future__ import annotations

import asyncio


class FreezingProxy:
    """Forwards 127.0.0.1:<port> to ``host``:``port``; ``thawed.clear()`` freezes it."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self.thawed = asyncio.Event()
        self.thawed.set()
        self._server: asyncio.Server | None = None
        self._pipes: set[asyncio.Task[None]] = set()

    @classmethod
    def to_url(cls, url: str) -> FreezingProxy:
        """In front of ``scheme://host:port[/...]``."""
        host, port = url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)
        return cls(host, int(port))

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.thawed.wait()
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        for pipe in (self._pipe(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(pipe)
            self._pipes.add(task)
            task.add_done_callback(self._pipes.discard)

    async def __aenter__(self) -> FreezingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self.thawed.set()
        self._server.close()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
