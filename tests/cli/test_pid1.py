"""`llmop` as a container's PID 1: SIGTERM ends it at any moment of its start.

The kernel delivers no signal to a PID namespace's init that it does not handle. A router
pod deleted while `llmop router` was still importing (a rollout caught it starting)
ignored SIGTERM and lived out its 330 s grace period, holding its CPU request: the node
could not place the next pods, the scheduler preempted a model for the operator's, and six
real-node tests failed in one run. Here a command that takes its time to import
stands in for any of them, in a PID namespace of its own (`unshare`, root).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SLOW_COMMAND = '''
import time
import click
print("importing", flush=True)
time.sleep(60)  # a command's imports, as long as the test needs
cmd = click.Command("slow")
'''
RUN = ("import sys; sys.path.insert(0, {where!r}); from llm_operator.cli import main; "
       "main.COMMANDS['slow'] = 'slow_command:cmd'; main.main()")


def _until_line(proc: subprocess.Popen[bytes], seconds: float) -> bytes:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], seconds)
    assert ready, f"the command said nothing in {seconds} s"
    return proc.stdout.readline()


def _pid_inside(pid: int) -> int:
    """The process's PID in its own namespace (the last of /proc's NSpid)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    (line,) = [line for line in status if line.startswith("NSpid:")]
    return int(line.split()[-1])


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.parametrize(("where", "exit_status"), [
    ("PID 1 of its own namespace, as in a container", 128 + signal.SIGTERM),
    ("an ordinary process, as on a host: the kernel's default", -signal.SIGTERM),
])
def test_sigterm_while_a_command_is_still_importing_ends_it(
        tmp_path: Path, where: str, exit_status: int) -> None:
    (tmp_path / "slow_command.py").write_text(SLOW_COMMAND)
    argv = [sys.executable, "-c", RUN.format(where=str(tmp_path)), "slow"]
    as_init = where.startswith("PID 1")
    if as_init:
        if os.geteuid() != 0:
            pytest.fail("a PID namespace of its own needs root (unshare --pid)")
        argv = ["unshare", "--pid", "--fork", "--kill-child", *argv]
    with subprocess.Popen(argv, stdout=subprocess.PIPE) as proc:
        try:
            assert _until_line(proc, 30) == b"importing\n"
            target = proc.pid
            if as_init:
                (target,) = _children(proc.pid)  # unshare's child
                assert _pid_inside(target) == 1
            sent = time.monotonic()
            os.kill(target, signal.SIGTERM)
            status = proc.wait(timeout=15)
        finally:
            proc.kill()
    assert status == exit_status, where
    assert time.monotonic() - sent < 15
