"""`llmop` commands run as a user runs them: a free port, a start seen in its log, a kill."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

Start = Callable[..., subprocess.Popen[bytes]]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def until_line(proc: subprocess.Popen[bytes], needle: bytes, seconds: float) -> None:
    """Read the process's stderr until a line holds ``needle`` (or fail after ``seconds``)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + seconds
    seen = []
    while (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([proc.stderr], [], [], left)
        if not ready:
            break
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return
    pytest.fail(f"no {needle!r} in {seconds} s; it said: {b''.join(seen)[-2000:]!r}")


@contextlib.contextmanager
def llmop_processes() -> Iterator[Start]:
    """Start ``llmop ARGS...`` and wait for the line that says it serves; killed at the end
    (the ``started`` fixture).

    After that line its stderr is read and dropped, so the process never blocks on it.
    """
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str, serving: bytes) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "llm_operator", *args],
                                stderr=subprocess.PIPE,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        procs.append(proc)
        until_line(proc, serving, 60)
        # then read on, so that a process logging much never blocks on a full pipe
        assert proc.stderr is not None
        threading.Thread(target=proc.stderr.read, daemon=True).start()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stderr is not None
        proc.stderr.close()
