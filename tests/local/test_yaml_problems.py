"""A file `llmop up` cannot read is named the way editors jump to it: file:line:column."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llm_operator.mcp_server.sources import DirectoryCache


@pytest.mark.parametrize(("content", "problem"), [
    (b"kind: LLMModel\nmetadata: {name: [\n",
     ":3:1: not valid YAML: did not find expected node content (while parsing a flow node)"),
    (b"kind: LLMModel\nspec:\n  modelId: x\n   bad: 1\n",
     ":4:7: not valid YAML: mapping values are not allowed in this context"),
    (b"kind: \xff\xfe\n", ": not UTF-8 text (byte 6)"),
])
def test_an_unreadable_file_is_one_line_naming_file_line_and_column(
        tmp_path: Path, content: bytes, problem: str) -> None:
    (tmp_path / "model.yaml").write_bytes(content)
    cache = DirectoryCache(tmp_path)
    cache.refresh()
    path = tmp_path / "model.yaml"
    assert cache.entries() == [(path, 0, f"{path}{problem}")]


MODEL = b"kind: LLMModel\nmetadata: {name: m}\nspec: {modelId: v1}\n"
EDITED = b"kind: LLMModel\nmetadata: {name: m}\nspec: {modelId: v2}\n"


@pytest.mark.parametrize(("then", "problem", "model_id"), [
    # an editor (or `>`) caught between truncating the file and writing it
    (b"", None, "v1"),
    (b"kind: LLMModel\nmetadata: {name: [\n",
     ":3:1: not valid YAML: did not find expected node content (while parsing a flow node)"
     "; its last readable version is kept", "v1"),
    (b"kind: \xff\xfe\n", ": not UTF-8 text (byte 6); its last readable version is kept", "v1"),
    (EDITED, None, "v2"),
], ids=["emptied", "yaml-error", "not-utf8", "edited"])
def test_a_file_that_turns_unreadable_keeps_its_last_readable_models(
        tmp_path: Path, then: bytes, problem: str | None, model_id: str) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(MODEL)
    cache = DirectoryCache(tmp_path)
    cache.refresh()
    path.write_bytes(then)
    os.utime(path, ns=(1, 1))  # a new fingerprint even within the clock's resolution
    assert cache.refresh()
    entries = cache.entries()
    problems = [e[2] for e in entries if isinstance(e[2], str)]
    assert problems == ([] if problem is None else [f"{path}{problem}"])
    assert [e[2]["spec"]["modelId"] for e in entries if isinstance(e[2], dict)] == [model_id]


def test_an_empty_file_that_never_held_a_model_is_just_empty(tmp_path: Path) -> None:
    (tmp_path / "model.yaml").write_bytes(b"")
    cache = DirectoryCache(tmp_path)
    cache.refresh()
    assert cache.entries() == []


def test_a_removed_file_takes_its_models_with_it(tmp_path: Path) -> None:
    path = tmp_path / "model.yaml"
    path.write_bytes(MODEL)
    cache = DirectoryCache(tmp_path)
    cache.refresh()
    path.unlink()
    assert cache.refresh()
    assert cache.entries() == []
