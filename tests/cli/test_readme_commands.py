"""Every command the README and the docs show exists as it is written: command, options, files.

Their shell blocks are read as a user copies them. Each `llmop` command (a group's
subcommand too) must be one the CLI has, each option one that command takes, each file of
this repository it names must exist. For the README also: its `make` targets must be the
Makefile's, the curl example must ask a model that `make up` serves with a JSON body, and
every path of the source tree's map must exist. (The bad-document example's output is
compared with `llmop validate`'s in test_cli.py; the quick start runs in tests/local.)
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
PAGES = [REPO / "README.md", *sorted(REPO.glob("docs/**/*.md")),
         *sorted(REPO.glob("examples/**/*.md"))]
BLOCKS = re.findall(r"```(?:sh|bash)?\n(.*?)```", README, re.S)
OURS = ("config/", "examples/", "docs/", "src/", "tests/", "bench/", "tools/")


def _commands(blocks: list[str] = BLOCKS) -> list[str]:
    """Each shell command of ``blocks``, comments and line continuations gone."""
    out = []
    for block in blocks:
        for written in block.replace("\\\n", " ").splitlines():
            line = written.split("  #")[0].split(" # ")[0].strip()
            out += [part.strip() for part in re.split(r"[;|&]", line) if part.strip()]
    return out


LLMOP = sorted({c for page in PAGES for c in _commands(re.findall(
    r"```(?:sh|bash|shell)?\n(.*?)```", page.read_text(encoding="utf-8"), re.S))
    if re.match(r"^(sudo )?(\.venv/bin/)?llmop ", c)})


def test_the_readme_and_docs_show_llmop_commands() -> None:
    assert len(LLMOP) >= 20, LLMOP


@pytest.mark.parametrize("line", LLMOP)
def test_an_llmop_command_of_the_docs_exists_with_its_options_and_files(line: str) -> None:
    words = shlex.split(line.removeprefix("sudo "))[1:]
    name = words[0]
    assert name in COMMANDS, f"{line}: llmop has no command {name!r}"
    command = Commands().get_command(click.Context(click.Command("llmop")), name)
    assert command is not None
    if isinstance(command, click.Group) and len(words) > 1 and not words[1].startswith("-"):
        sub = command.get_command(click.Context(command), words[1])
        assert sub is not None, f"{line}: llmop {name} has no command {words[1]!r}"
        command, words = sub, words[1:]
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
