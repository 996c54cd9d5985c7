"""Closing the client closes its TLS connections, even to a peer that never says goodbye."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_operator.kube import Connection, Kube

from controlplane import write_pki

WATCH_EVENT = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()


class SilentPeer:
    """A TLS server that answers one watch and then never reads again (no close_notify back).

    Python 3.11's asyncio waits up to 30 s for the peer's close_notify after a graceful
    close; a dead or wedged API server never sends it. ``closed`` tells whether the client
    closed the TCP connection within ``grace`` seconds of our last byte.
    """

    def __init__(self, pki: Path, grace: float = 5.0) -> None:
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(pki / "server.crt", pki / "server.key")
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.grace = grace
        self.closed: bool | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        with self.context.wrap_socket(conn, server_side=True) as tls:
            request = b""
            while b"\r\n\r\n" not in request:
                request += tls.recv(4096)
            body = WATCH_EVENT + b"\n"
            tls.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Transfer-Encoding: chunked\r\n\r\n"
                        + f"{len(body):x}\r\n".encode() + body + b"\r\n")
            raw = socket.socket(fileno=os.dup(tls.fileno()))
            raw.settimeout(self.grace)
            with raw:
                try:
                    while raw.recv(4096):  # the client's close_notify, then its FIN
                        pass
                    self.closed = True
                except ConnectionResetError:
                    self.closed = True
                except TimeoutError:
                    self.closed = False
        self.done.set()


@pytest.fixture
def silent_peer(tmp_path: Path) -> Iterator[SilentPeer]:
    write_pki(tmp_path)
    peer = SilentPeer(tmp_path)
    peer.thread.start()
    yield peer
    peer.listener.close()


async def test_a_watch_abandoned_mid_stream_does_not_leave_its_connection_open(
        silent_peer: SilentPeer, tmp_path: Path) -> None:
    conn = Connection(server=f"https://127.0.0.1:{silent_peer.port}",
                      ca_file=str(tmp_path / "ca.crt"))
    first: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def watch(kube: Kube) -> None:
        async for _, obj in kube.watch("v1", "configmaps", "ns", resource_version="1"):
            first.set_result(obj["metadata"]["name"])

    async with Kube(conn) as kube:
        task = asyncio.create_task(watch(kube))
        assert await asyncio.wait_for(first, 10) == "a"
        task.cancel()  # as the operator's shutdown cancels its informers
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert await asyncio.to_thread(silent_peer.done.wait, 30)
    assert silent_peer.closed, "the TCP connection outlived the client"
