"""What `llmop up` and `llmop status` print for a snapshot (pure rendering)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from rich.console import Console

from llm_operator.local.display import event_line, view

SNAPSHOT: dict[str, Any] = {
    "gateway": "http://127.0.0.1:8000/v1", "mcp": "http://127.0.0.1:3000/mcp",
    "logs": "/state/logs", "problems": ["models/broken.yaml:3:1: not valid YAML: ..."],
    "models": [
        {"name": "gemma3-270m", "modelId": "gemma-3-270m", "tool": "gemma3_270m_local",
         "where": "llama-server :41233", "phase": "Ready", "restarts": 1, "detail": "pid 12",
         "progress": None,
         "load": {"slots": 8, "busy": 3, "waiting": 2, "tokensPerSecond": 141.6}},
        {"name": "gpt55-remote", "modelId": "gpt-5.5", "tool": None, "where": "-",
         "phase": "Skipped", "restarts": 0, "detail": "set OPENAI_API_KEY", "progress": None},
    ]}


def render(snapshot: dict[str, Any], **options: str) -> str:
    console = Console(width=120, record=True, file=None, force_terminal=False)
    with console.capture() as capture:
        console.print(view(snapshot, **options))
    return capture.get()


def cells(line: str) -> list[str]:
    """A borderless table row's cells (separated by two spaces or more)."""
    return re.split(r"\s{2,}", line.strip())


def test_the_table_problems_and_endpoints_are_shown() -> None:
    out = render(SNAPSHOT)
    lines = out.splitlines()
    assert cells(lines[0]) == ["MODEL", "MODEL ID", "MCP TOOL", "STATUS", "RESTARTS", "SLOTS",
                               "QUEUE", "TOK/S", "DETAIL"]
    # 3 of 8 slots generate, 2 requests wait for one
    assert cells(lines[1]) == ["gemma3-270m", "gemma-3-270m", "gemma3_270m_local", "Ready",
                               "1", "3/8", "2", "142", "llama-server :41233, pid 12"]
    assert cells(lines[2])[3:] == ["Skipped", "0", "-", "-", "-", "set OPENAI_API_KEY"]
    assert "Files with problems (the other models still run):\n  models/broken.yaml" in out
    assert "Gateway (OpenAI API)  http://127.0.0.1:8000/v1\n" in out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Try:"))
    assert lines[start:start + 4] == [
        "Try:  curl -s http://127.0.0.1:8000/v1/completions \\",
        "        -H 'Content-Type: application/json' \\",
        "        -d '{\"model\": \"gemma-3-270m\", \"max_tokens\": 32, \"stop\": [\"\\n\"], "
        "\"temperature\": 0,",
        "           \"prompt\": \"Q: What is the capital of France?\\nA:\"}'"]
    assert out.rstrip().endswith("Stop: Ctrl-C")
    assert render(SNAPSHOT, stop=".venv/bin/llmop down").rstrip().endswith(
        "Stop: .venv/bin/llmop down")


def test_a_file_being_assembled_shows_its_progress() -> None:
    assembling = {**SNAPSHOT, "models": [{**SNAPSHOT["models"][0], "phase": "Downloading",
                                          "progress": [120 * 2**20, 241 * 2**20]}]}
    out = render(assembling)
    assert "120/241" in out
    assert "Try:" not in out  # nothing serves yet


@pytest.mark.parametrize(("row", "line"), [
    (SNAPSHOT["models"][0], "gemma3-270m: Ready (restarts: 1): pid 12"),
    (SNAPSHOT["models"][1], "gpt55-remote: Skipped: set OPENAI_API_KEY"),
])
def test_event_lines(row: dict[str, Any], line: str) -> None:
    assert event_line(row) == line


@pytest.mark.parametrize(("batches", "shown"), [
    (None, None),
    ({"unfinished": 0, "running": []}, None),
    ({"unfinished": 3, "running": [{"id": "batch_1", "status": "in_progress", "total": 1000,
                                    "completed": 118, "failed": 2}]},
     "Batches  batch_1 in_progress: 120/1000 requests (2 failed); 2 waiting"),
    ({"unfinished": 1, "running": [{"id": "batch_1", "status": "cancelling", "total": 10,
                                    "completed": 4, "failed": 0}]},
     "Batches  batch_1 cancelling: 4/10 requests; none waiting"),
], ids=["batch-api-off", "no-batches", "one-running-two-waiting", "cancelling"])
def test_batches_are_shown_while_there_are_any(batches: dict[str, Any] | None,
                                                shown: str | None) -> None:
    lines = render({**SNAPSHOT, "batches": batches}).splitlines()
    found = [line for line in lines if line.startswith("Batches")]
    assert found == ([] if shown is None else [shown])
