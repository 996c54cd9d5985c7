"""`llmop up DIRECTORY` for a benchmark: started on free ports, waited for, stopped after."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def llmop_up(directory: Path, state: Path) -> Iterator[int]:
    """`llmop up` serving ``directory``; its gateway's port once a model is Ready.

    SystemExit when it does not serve within 10 minutes (llama-server not built: `make
    up` once). Stopped with SIGTERM, as Ctrl-C stops it, when the block ends.
    """
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llm_operator", "up", str(directory), "--port", str(port),
         "--mcp-port", str(free_port()), "--state-dir", str(state)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/models",
                                            timeout=5) as page:
                    if b"phase-ready" in page.read():
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"llmop up {directory} did not serve: run `make up` once")
            time.sleep(0.5)  # a process outside this one: nothing to wait on but it
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
