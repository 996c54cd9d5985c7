"""Every command the README shows exists as it is written: its command, options and files.

The README's blocks are read as a user copies them. Each `llmop` command must be one the
CLI has, each option one that command takes, each file of this repository it names must
exist; `make` targets must be the Makefile's; the curl example must ask a model that
`make up` serves, with a JSON body; every path of the source tree's map must exist. (The
bad-document example's output is compared with `llmop validate`'s in test_cli.py; the
quick start runs in tests/local.)
"""

from __future__ import annotations

import json
import re
import shlex

import click
import pytest
import yaml

from llm_operator.cli.main import COMMANDS, Commands

from samples import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(?:sh|bash)?\n(.*?)```", README, re.S)
OURS = ("config/", "examples/", "docs/", "src/", "tests/", "bench/", "tools/")


def _commands() -> list[str]:
    """Each shell command of the README's blocks, comments and line continuations gone."""
    out = []
    for block in BLOCKS:
        for written in block.replace("\\\n", " ").splitlines():
            line = written.split("  #")[0].split(" # ")[0].strip()
            out += [part.strip() for part in re.split(r"[;|]", line) if part.strip()]
    return out


LLMOP = [c for c in _commands() if re.match(r"^(\.venv/bin/)?llmop ", c)]


def test_the_readme_shows_llmop_commands() -> None:
    assert len(LLMOP) >= 10, LLMOP


@pytest.mark.parametrize("line", LLMOP)
def test_an_llmop_command_of_the_readme_exists_with_its_options_and_files(line: str) -> None:
    words = shlex.split(line)[1:]
    name = words[0]
    assert name in COMMANDS, f"{line}: llmop has no command {name!r}"
    command = Commands().get_command(click.Context(click.Command("llmop")), name)
    assert command is not None
    options = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in words[1:]:
        flag = word.split("=")[0]
        if flag.startswith("-"):
            assert flag in options, f"{line}: llmop {name} has no option {flag}"
        elif word.startswith(OURS):
            assert (REPO / word).exists(), f"{line}: no {word} in the repository"


def test_make_targets_of_the_readme_are_the_makefiles() -> None:
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    asked = {c.split()[1] for c in _commands() if c.startswith("make ")}
    assert asked >= {"up", "test"}
    assert asked <= targets, asked - targets


def test_the_curl_example_asks_a_model_make_up_serves() -> None:
    (curl,) = [c for c in _commands() if c.startswith("curl ")]
    body = json.loads(shlex.split(curl)[shlex.split(curl).index("-d") + 1])
    served = {yaml.safe_load(p.read_text())["spec"]["modelId"]
              for p in (REPO / "examples" / "local").glob("*.yaml")}
    assert body["model"] in served


def test_every_path_of_the_source_map_exists() -> None:
    (tree,) = [b for b in BLOCKS if b.startswith("src/llm_operator/api/")]
    paths = [line.split()[0] for line in tree.splitlines() if line and not line[0].isspace()]
    assert len(paths) > 10
    assert [p for p in paths if not (REPO / p).exists()] == []
