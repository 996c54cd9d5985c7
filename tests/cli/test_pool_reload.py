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


@pytest.mark.parametrize(("first", "steps", "said", "calls"), [
    # (what the preset holds as the watch starts, then before each step, None: unreadable),
    # what each step logs, and how often the router was asked in all
    ("a", ["a", "a"], [None, None], 0),
    ("a", ["b", "b"], ["the router read the preset again", None], 1),
    (None, [None, "a"], [None, "the router holds the preset"], 1),
    ("a", [None, "a"], [None, None], 0),
    ("a", [None, None, None, None], [None, None, "cannot read the preset", None], 0),
], ids=["unchanged-never-asked", "changed-once", "absent-at-start", "swapped-in-between",
        "unreadable-said-once"])
def test_the_router_is_asked_once_per_change(tmp_path: Path, first: str | None,
                                             steps: list[str | None], said: list[str | None],
                                             calls: int) -> None:
    """The preset the watch starts with is the one the router started with: not asked
    (a reload would also forget a member's failed load)."""
    preset = tmp_path / "models.ini"
    if first is not None:
        preset.write_text(first)
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
    preset.write_text("[n]\n")
    lines = [watch.step() for _ in range(4)]
    assert lines[0] is not None and "not read yet: the router is not answering" in lines[0]
    assert lines[1] is None  # the same reason, not said again
    assert lines[2] is not None and lines[2].startswith("the router read the preset again")
    assert lines[3] is None and router.calls == 3


class Engine(http.server.ThreadingHTTPServer):
    """A router on loopback that notes each path it is asked for, and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status, self.asked = status, queue.Queue[str]()
        self.body = b'{"data": []}'
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.asked.put(self.path)
                body = outer.body
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
    engine.status, engine.body = 500, b"option 'n-predictt' not recognized in preset 'a'"
    assert ask_reload(engine.url + "/", timeout=5) == \
        "the router answered 500: option 'n-predictt' not recognized in preset 'a'"
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
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith(f"watching {preset} (")
    written = preset.with_suffix(".tmp")
    written.write_text("[a]\nctx-size = 4096\n")
    written.replace(preset)  # as the kubelet swaps a ConfigMap's files: whole
    assert engine.asked.get(timeout=30) == "/models?reload=1"
    assert proc.stderr.readline().startswith("the router read the preset again")
    assert engine.asked.empty()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=10) == 0


def test_sigterm_ends_it_while_a_reload_waits_for_the_router(tmp_path: Path) -> None:
    """A reload waits for the edited member's requests; the pod's end does not."""
    preset = tmp_path / "models.ini"
    preset.write_text("[a]\n")
    with socket.socket() as silent:  # accepts, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(30)
        with subprocess.Popen(
                [sys.executable, "-m", "llm_operator", "pool-reload", "--preset", str(preset),
                 "--engine", f"http://127.0.0.1:{silent.getsockname()[1]}", "--every", "0.1"],
                stderr=subprocess.PIPE, text=True) as proc:
            try:
                assert proc.stderr is not None
                assert proc.stderr.readline().startswith("watching")
                preset.write_text("[b]\n")
                conn, _ = silent.accept()  # the reload is waiting for its answer
                with conn:
                    proc.send_signal(signal.SIGTERM)
                    assert proc.wait(timeout=10) == 0
            finally:
                proc.kill()
