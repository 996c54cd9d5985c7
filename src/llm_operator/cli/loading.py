"""Read LLMModel documents from files, directories or stdin, keeping each one's origin."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.validation import object_label
from llm_operator.profiles.settings import Settings

YAML_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Document:
    """One YAML document, or the reason a file could not be read."""

    file: str
    index: int
    body: Any = None
    error: str | None = None

    @property
    def label(self) -> str:
        return object_label(self.body, self.index)


def _files(paths: Iterable[str]) -> list[str]:
    out: list[str] = []
    for raw in paths:
        path = Path(raw)
        if raw == "-":
            out.append("-")
        elif path.is_dir():
            out += sorted(str(p) for p in path.rglob("*") if p.suffix in YAML_SUFFIXES)
        else:
            out.append(raw)
    return out


def _parse(name: str, text: str) -> list[Document]:
    try:
        bodies = [b for b in yaml.safe_load_all(text) if b is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        return [Document(name, 0, error=f"malformed YAML{where}: {problem}")]
    return [Document(name, i, body=b) for i, b in enumerate(bodies)]


def load_documents(paths: Iterable[str]) -> list[Document]:
    """All documents under ``paths`` (files, directories searched recursively, or "-")."""
    docs: list[Document] = []
    for name in _files(paths):
        if name == "-":
            docs += _parse("<stdin>", sys.stdin.read())
            continue
        try:
            text = Path(name).read_text(encoding="utf-8")
        except OSError as exc:
            docs.append(Document(name, 0, error=f"cannot read: {exc.strerror or exc}"))
            continue
        docs += _parse(name, text)
    return docs


def load_settings(path: str | None) -> Settings:
    """Operator settings from a YAML file, or the defaults."""
    if not path:
        return Settings()
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    return Settings.model_validate(data)
