"""Thousands of idle and half-open connections cost `llmop gateway` little, and stop nobody.

The gateway runs as a user runs it; 2,000 connections are opened to it (fewer where the
file limit is lower): half send nothing, half a request whose body never comes (a
slowloris). Once the gateway holds every one (its open files say so), each has cost it a
bounded amount of memory, and a new client is still answered at once. The connections
are then closed by their keepalive (tests/gateway/test_server.py: after
``KEEPALIVE_SECONDS``, a 408 for the half-sent request).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from llmop_process import Start, free_port

CONNECTIONS = 2000
SLACK = 8  # files of the gateway's that may close while it is counted
MOST_PER_CONNECTION = 32 * 1024  # bytes of the gateway's memory one idle connection may take
SLOW = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100\r\n\r\n{\"model\"")


def _rss(pid: int) -> int:
    """The process's resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


@contextlib.contextmanager
def _file_limit(wanted: int) -> Iterator[int]:
    """The soft open-files limit raised toward ``wanted`` (what the gateway inherits)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = max(soft, wanted if hard == resource.RLIM_INFINITY else min(hard, wanted))
    resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    try:
        yield raised
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_thousands_of_idle_connections_cost_little_and_stop_no_one(
        tmp_path: Path, started: Start) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(json.dumps({"listen": {"host": "127.0.0.1", "port": port}, "routes": [
        {"models": ["m"], "upstream": {"baseUrl": "http://127.0.0.1:9/v1", "auth": "none"}}]}))
    url = f"http://127.0.0.1:{port}"
    with _file_limit(2 * CONNECTIONS + 200) as limit:
        count = min(CONNECTIONS, (limit - 200) // 2)  # this process's ends count too
        proc = started("gateway", "--config", str(config), serving=b"gateway listening")
        assert httpx.get(f"{url}/health", timeout=10).status_code == 200
        memory, files = _rss(proc.pid), _open_files(proc.pid)
        idle: list[socket.socket] = []
        try:
            for index in range(count):
                connection = socket.create_connection(("127.0.0.1", port), timeout=10)
                idle.append(connection)
                if index % 2:
                    connection.sendall(SLOW)
            deadline = time.monotonic() + 60
            # the gateway holds them all (give or take the few files it had open when
            # counted: the health check's connection may close after that)
            while (held := _open_files(proc.pid)) < files + count - SLACK:
                assert time.monotonic() < deadline, \
                    f"the gateway took {held - files} of {count} connections in 60 s"
                time.sleep(0.02)  # another process's state: nothing to wait on
            grown = _rss(proc.pid) - memory
            asked = time.monotonic()
            health = httpx.get(f"{url}/health", timeout=10)
            answered = time.monotonic() - asked
        finally:
            for connection in idle:
                connection.close()
    assert count >= 500, f"only {count} connections could be opened here"
    assert grown / count < MOST_PER_CONNECTION, \
        f"{grown / count / 1024:.1f} KiB a connection ({count} connections)"
    assert health.status_code == 200
    # liveness, not speed (bench/ measures speed): a stalled gateway would take minutes
    assert answered < 10, f"a new client waited {answered:.2f} s beside {count} idle ones"
