"""docs/reference/cli.md: every `llmop` command and option, as its own `--help` says them.

    .venv/bin/python tools/cli_reference.py [--check]

Reads the click commands (llm_operator/cli/main.py's ``COMMANDS``, groups' subcommands
too) and writes each one's `--help` text, in the order `llmop --help` lists them;
``--check`` exits 1 when the page is not what the code says
(tests/harness/test_reference_pages.py runs it in `make test`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_page import REPO, main

PAGE = REPO / "docs" / "reference" / "cli.md"
WIDTH = 100  # the commands' own max_content_width


def helps(command: click.Command, path: list[str], parent: click.Context | None
          ) -> Iterator[tuple[str, str]]:
    """(the command line, its help text) of ``command`` and, for a group, each subcommand."""
    ctx = click.Context(command, info_name=path[-1], parent=parent, terminal_width=WIDTH,
                        max_content_width=WIDTH)
    yield " ".join(path), command.get_help(ctx)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from helps(sub, [*path, name], ctx)


def page() -> str:
    sys.path.insert(0, str(REPO / "src"))
    from llm_operator.cli.main import cli  # noqa: PLC0415

    found = list(helps(cli, ["llmop"], None))
    lines = ["# `llmop` commands", "",
             "Every command and option, as its `--help` prints them: written from the code by "
             "`tools/cli_reference.py` (`make test` fails when this page is stale).", ""]
    lines += [f"- [`{line}`](#{line.replace(' ', '-')})" for line, _ in found[1:]]
    lines.append("")
    for line, text in found:
        lines += [f'<a id="{line.replace(" ", "-")}"></a>', "", f"## `{line}`", "",
                  "```text", text.rstrip(), "```", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(PAGE, page, Path(__file__).name, __doc__.split("\n\n")[0]))
