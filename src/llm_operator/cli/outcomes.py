"""The LLMModel documents a command is given: each parsed, its problems printed, the exit code."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import click
import yaml
from pydantic import ValidationError
from rich.console import Console

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, Problem, parse_llmmodel
from llm_operator.cli.loading import Document, load_documents, load_settings
from llm_operator.profiles.settings import Settings

files_option = click.option(
    "-f", "--filename", "paths", multiple=True, required=True, metavar="FILE|DIR|-",
    help="LLMModel YAML file, directory (searched recursively) or - for stdin. Repeatable.",
)
settings_option = click.option(
    "--settings", "settings_path", metavar="FILE", envvar="LLMOP_SETTINGS",
    help="Operator settings YAML (image mirrors, node selectors, storage class, Prometheus). "
    "Defaults to $LLMOP_SETTINGS, else built-in defaults. See docs/settings.md.",
)


@dataclass
class Outcome:
    """What happened to one document."""

    doc: Document
    model: LLMModel | None
    problems: list[Problem]


def print_problems(console: Console, outcome: Outcome) -> None:
    for p in outcome.problems:
        where = f"{p.path}: " if p.path else ""
        console.print(f"[red]error[/red] {outcome.doc.file}: {outcome.doc.label}: {where}"
                      f"{p.message}", highlight=False, markup=True, soft_wrap=True)


def outcomes(paths: tuple[str, ...]) -> Iterator[Outcome]:
    for doc in load_documents(paths):
        if doc.error:
            yield Outcome(doc, None, [Problem("", doc.error)])
            continue
        try:
            yield Outcome(doc, parse_llmmodel(doc.body), [])
        except InvalidModel as exc:
            yield Outcome(doc, None, exc.problems)


def settings_from(path: str | None) -> Settings:
    """The --settings file's settings, or a usage error that says what is wrong with it."""
    try:
        return load_settings(path)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise click.UsageError(f"invalid settings file {path}: {exc}") from None


def each_document(paths: tuple[str, ...], each: Callable[[Outcome], None]) -> int:
    """Apply ``each`` to every document; the exit code is 1 if any had a problem."""
    failed = 0
    seen = 0
    for outcome in outcomes(paths):
        seen += 1
        each(outcome)
        failed += bool(outcome.problems)
    if seen == 0:
        raise click.UsageError(f"no YAML documents found in {', '.join(paths)}")
    return 1 if failed else 0
