"""A file `llmop up` cannot read is named the way editors jump to it: file:line:column."""

from __future__ import annotations

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
