"""A stop is a stop: SIGTERM ends each server within its drain deadline, whatever it runs.

Each server runs as a user runs it (`llmop gateway --config FILE`, `llmop mcp -f DIR`) with
a drain deadline of 2 s, and is signalled while a request is caught mid-work:

- the gateway, while a PII guard reads 780 KB of phone numbers (tens of seconds of work),
  seen working on the guard's worker thread;
- the MCP server, while a tool call waits on a model that accepted the call and never
  answers (the call's own timeout is 300 s).

The process must end within the deadline (plus its own exit), with status 0 (the MCP
server: by the signal, which uvicorn raises again once it has shut down), the caller's
connection closed or answered with an error, and nothing left running.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx

from llmop_process import Start, free_port
from mcptools import guide_models

DRAIN = 2
PHONES = "call +1 415 555 0100 now, " * 30_000  # 780,000 characters: about 40 s of checking
Answers = list[httpx.Response | Exception]


def _worker_ticks(pid: int) -> int:
    """CPU ticks the gateway's threads but its event loop's have used: the guard's worker.

    (Python does not name its threads for the kernel: every one is "python" in /proc.)
    """
    ticks = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        if task.name == str(pid):  # the main thread: the event loop
            continue
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except FileNotFoundError:  # a thread that ended as we looked
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def _sent(http: httpx.Client, path: str, body: dict[str, object]
          ) -> tuple[threading.Thread, Answers]:
    """``body`` POSTed to ``path`` from a thread of its own: its answer, or its error."""
    answers: Answers = []

    def send() -> None:
        try:
            answers.append(http.post(path, json=body))
        except httpx.HTTPError as exc:
            answers.append(exc)
    sender = threading.Thread(target=send)
    sender.start()
    return sender, answers


def _stopped(proc: subprocess.Popen[bytes], sender: threading.Thread, answers: Answers,
             exits: tuple[int, ...] = (0,)) -> None:
    """SIGTERM now: the process ends within the deadline, and the caller hears of it."""
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(DRAIN + 30)
    stopped = time.monotonic() - signalled
    sender.join(10)
    assert status in exits
    assert stopped < DRAIN + 5, f"it took {stopped:.1f} s to stop after SIGTERM"
    (answer,) = answers  # its connection closed, or an error answer
    assert isinstance(answer, httpx.HTTPError) or answer.status_code >= 500 \
        or "error" in answer.text, answer


def test_sigterm_mid_guard_check_ends_the_gateway_within_its_drain_deadline(
        tmp_path: Path, started: Start) -> None:
    port = free_port()
    config = tmp_path / "gateway.yaml"
    config.write_text(json.dumps({
        "listen": {"host": "127.0.0.1", "port": port, "drainSeconds": DRAIN},
        "routes": [{"models": ["m"], "upstream": {"baseUrl": "http://127.0.0.1:9/v1",
                                                 "auth": "none"},
                    "guardrails": {"maxCheckedChars": 1_000_000, "input": [
                        {"name": "no-pii", "action": "mask", "pii": {}}]}}]}))
    proc = started("gateway", "--config", str(config), serving=b"gateway listening")
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
        warm = http.post("/v1/moderations", json={"model": "m",
                                                  "input": "mail jane@example.com"})
        assert warm.status_code == 200  # the PII detector is built: what follows is the check
        assert warm.json()["results"][0]["categories"]["pii"] is True
        before = _worker_ticks(proc.pid)
        sender, answers = _sent(http, "/v1/moderations", {"model": "m", "input": PHONES})
        deadline = time.monotonic() + 60
        while _worker_ticks(proc.pid) < before + 50:  # half a second of the guard's work
            assert time.monotonic() < deadline, "the guard never started on the check"
            assert not answers, f"the check ended before it was seen working: {answers}"
            time.sleep(0.02)  # polling another process's thread: nothing to wait on
        _stopped(proc, sender, answers)


def test_sigterm_mid_tool_call_ends_the_mcp_server_within_its_drain_deadline(
        tmp_path: Path, started: Start) -> None:
    with socket.socket() as model:  # takes the call, never answers
        model.bind(("127.0.0.1", 0))
        model.listen(8)
        models = tmp_path / "models"
        models.mkdir()
        status = guide_models(models, f"http://127.0.0.1:{model.getsockname()[1]}/v1")
        port = free_port()
        proc = started("mcp", "-f", str(models), "--status-file", str(status), "--port",
                       str(port), "--drain-seconds", str(DRAIN),
                       serving=b"Application startup complete")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=120) as http:
            sender, answers = _sent(http, "/mcp", {
                "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                    "name": "gpt55_frontier", "arguments": {
                        "messages": [{"role": "user", "content": "Hello"}]}}})
            model.settimeout(60)
            call, _ = model.accept()  # the tool call reached the model, which is silent
            with call:
                # uvicorn, once it has shut down, raises the signal again: 143 in a pod
                _stopped(proc, sender, answers, exits=(0, -signal.SIGTERM))
