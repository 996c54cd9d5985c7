"""The status file the local runtime writes: only a complete, valid file changes the tools."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from llm_operator.mcp_server.sources import FileSource
from llm_operator.registry.catalog import ToolRecord

from mcptools import guide_models


async def _ignore(_: list[ToolRecord]) -> None:
    return None


def callable_tools(source: FileSource) -> set[str]:
    records, _ = source._cache.records(source._statuses)  # what _scan publishes
    return {r.tool_name for r in records if r.callable}


@pytest.mark.parametrize("torn", [
    "qwen35-9b-cpu: {phase: Rea",  # cut mid-write
    "",  # truncated to nothing
    "- qwen35-9b-cpu\n",  # not a mapping
    "qwen35-9b-cpu: Ready\n",  # a status without its phase
    "\xff\xfe",  # not text
], ids=["cut", "empty", "list", "no-phase", "binary"])
def test_a_torn_status_file_keeps_the_last_good_state(tmp_path: Path, torn: str,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    models = tmp_path / "models"
    models.mkdir()
    status_file = guide_models(models, "http://127.0.0.1:9/v1")
    good = yaml.safe_load(status_file.read_text())
    source = FileSource(models, _ignore, status_file=status_file)
    assert source._scan() is not None  # the first scan publishes
    source.synced.set()  # as rescan() does once published
    before = callable_tools(source)
    assert len(before) == 7
    status_file.write_bytes(torn.encode("latin-1"))
    assert source._scan() is None  # nothing to publish, no list_changed
    assert callable_tools(source) == before
    assert "keeping the last good statuses" in caplog.text
    good["qwen35-9b-cpu"] = {"phase": "Downloading"}
    status_file.write_text(yaml.safe_dump(good))  # a complete file replaces it
    assert source._scan() is not None
    assert callable_tools(source) == before - {"qwen35_9b_cpu"}
