"""docs/tutorials/first-model-on-a-laptop.md, run as a reader runs it: each block in order.

The blocks run as written (bash, from a copy of the repository's examples beside the
project's .venv) inside a network namespace of their own, so that the tutorial's ports
(8000, 3000) are free as on a new machine; a Python block is saved as the file the text
names. Each block's output is checked for what the text says it shows. `make up` is the
one block not run here: it is `llmop up examples/local` in the foreground after the setup
`make test` has already done (tests/cli/test_readme_commands.py checks the target).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from netns import Host, lone_host, missing
from samples import REPO

TUTORIAL = REPO / "docs" / "tutorials" / "first-model-on-a-laptop.md"
BLOCK = re.compile(r"^```(sh|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
Check = Callable[[str], bool]


def _ready_with_tier(out: str) -> bool:
    model = next(m for m in json.loads(out)["models"] if m["name"] == "gemma3-270m")
    return model["phase"] == "Ready" and model["hostKvCache"] == "512Mi"


# What each block shows, in the tutorial's order: (its first words, what its output holds).
EXPECTED: list[tuple[str, Check | None]] = [
    ("make up", None),  # not run: the foreground form of the next block
    (".venv/bin/llmop up examples/local --detach", lambda out: "Ready" in out),
    (".venv/bin/llmop status", lambda out: "gemma3-270m" in out and "Ready" in out),
    ("curl -s http://127.0.0.1:8000/v1/completions",
     lambda out: json.loads(out)["choices"][0]["text"] == " Paris"),
    ("from openai import OpenAI", None),  # saved as ask.py
    (".venv/bin/python ask.py", lambda out: out.strip() != ""),
    (".venv/bin/python examples/clients/mcp_tools.py",
     lambda out: "gemma3_270m_local answered:" in out and "(error)" not in out),
    ("sed -i", None),  # the restart is waited for below
    (".venv/bin/llmop down", lambda out: True),
]


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(TUTORIAL.read_text())]


def test_the_tutorial_and_this_test_list_the_same_blocks() -> None:
    assert [text.lstrip().startswith(first) for (_, text), (first, _) in
            zip(_blocks(), EXPECTED, strict=True)] == [True] * len(EXPECTED)


def _run(host: Host, block: str, work: Path, env: dict[str, str]) -> str:
    done = subprocess.run(host.command(["bash", "-euo", "pipefail", "-c", block]), cwd=work,
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, f"{block}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.skipif(missing() is not None, reason=str(missing()))
def test_every_block_of_the_laptop_tutorial_does_what_it_says(tmp_path: Path) -> None:
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(REPO / "examples", work / "examples")
    (work / ".venv").symlink_to(REPO / ".venv")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["LLMOP_STATE_DIR"] = str(tmp_path / "state")
    with lone_host() as host:
        for (language, text), (_, check) in zip(_blocks(), EXPECTED, strict=True):
            if text.startswith("make up"):
                continue
            if language == "python":
                (work / "ask.py").write_text(text)
                continue
            out = _run(host, text, work, env)
            if check is not None:
                assert check(out), f"{text}\n{out}"
            if text.startswith("sed -i"):  # the model restarts with the new tier
                deadline = time.monotonic() + 180
                while not _ready_with_tier(_run(host, ".venv/bin/llmop status -o json",
                                                work, env)):
                    assert time.monotonic() < deadline, "not Ready with 512Mi in 180 s"
                    time.sleep(1)  # a process restarting: `llmop status` is what a reader has
        left = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True,
                              text=True, check=True).stdout.split()
        assert left == []  # `llmop down` left nothing running
