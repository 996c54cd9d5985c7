"""`llmop pool-reload`: the pool's router reads its preset again when, and only when, it changes."""

from __future__ import annotations

import http.server
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from llm_operator.cli.pool_reload import PresetWatch, ask_reload


class Router:
    """What the watch asks of the router: each answer in turn, each call counted."""

    def __init__(self, *answers: str | None) -> None:
        self.answers, self.calls = list(answers), 0

    def __call__(self) -> str | None:
        self.calls += 1
        return self.answers.pop(0) if self.answers else None


@pytest.mark.parametrize(("steps", "said", "calls"), [
    # (what the preset holds before each step, or None: unreadable), what each step logs,
    # and how often the router was asked in all
    (["a", "a", "a"], ["the router holds the preset", None, None], 1),
    (["a", "b", "b"], ["the router holds the preset", "the router read the preset again",
                       None], 2),
    ([None, None, "a"], [None, None, "the router holds the preset"], 1),
    (["a", None, "a"], ["the router holds the preset", None, None], 1),
], ids=["unchanged", "changed-once", "unreadable-then-there", "swapped-in-between"])
def test_the_router_is_asked_once_per_content(tmp_path: Path, steps: list[str | None],
                                              said: list[str | None], calls: int) -> None:
    preset = tmp_path / "models.ini"
    router = Router()
    watch = PresetWatch(preset, router)
    for content, expected in zip(steps, said, strict=True):
        if content is None:
            preset.unlink(missing_ok=True)
        else:
            preset.write_text(content)
        line = watch.step()
        if expected is None:
            assert line is None
        else:
            assert line is not None and line.startswith(expected)
    assert router.calls == calls


def test_a_router_not_answering_is_asked_again_and_said_once(tmp_path: Path) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text("[m]\n")
    router = Router("the router is not answering (refused)",
                    "the router is not answering (refused)", None)
    watch = PresetWatch(preset, router)
    lines = [watch.step() for _ in range(4)]
    assert lines[0] is not None and "not read yet: the router is not answering" in lines[0]
    assert lines[1] is None  # the same reason, not said again
    assert lines[2] is not None and lines[2].startswith("the router holds the preset")
    assert lines[3] is None and router.calls == 3


class Engine(http.server.ThreadingHTTPServer):
    """A router on loopback that notes each path it is asked for, and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status, self.asked = status, queue.Queue[str]()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.put(self.path)
                body = b'{"data": []}'
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def engine() -> Iterator[Engine]:
    served = Engine()
    thread = threading.Thread(target=served.serve_forever, daemon=True)
    thread.start()
    yield served
    served.shutdown()
    served.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ask_reload_says_why_the_router_did_not_read_it(engine: Engine) -> None:
    assert ask_reload(engine.url, timeout=5) is None
    assert engine.asked.get(timeout=5) == "/models?reload=1"
    engine.status = 503
    assert ask_reload(engine.url + "/", timeout=5) == "the router answered 503"
    why = ask_reload(f"http://127.0.0.1:{_closed_port()}", timeout=5)
    assert why is not None and why.startswith("the router is not answering")


def test_the_command_reloads_on_an_edit_and_stops_on_sigterm(engine: Engine,
                                                             tmp_path: Path) -> None:
    preset = tmp_path / "models.ini"
    preset.write_text("[a]\nctx-size = 2048\n")
    with subprocess.Popen(
            [sys.executable, "-m", "llm_operator", "pool-reload", "--preset", str(preset),
             "--engine", engine.url, "--every", "0.1"],
            stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}) as proc:
        try:
            _reloads_and_stops(proc, engine, preset)
        finally:
            proc.kill()


def _reloads_and_stops(proc: subprocess.Popen[str], engine: Engine, preset: Path) -> None:
    assert engine.asked.get(timeout=30) == "/models?reload=1"  # once it starts
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("the router holds the preset")
    written = preset.with_suffix(".tmp")
    written.write_text("[a]\nctx-size = 4096\n")
    written.replace(preset)  # as the kubelet swaps a ConfigMap's files: whole
    assert engine.asked.get(timeout=30) == "/models?reload=1"
    assert proc.stderr.readline().startswith("the router read the preset again")
    assert engine.asked.empty()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0
