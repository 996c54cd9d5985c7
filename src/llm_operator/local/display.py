"""How `llmop up` and `llmop status` show the stack: model table, problems, endpoints."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

STYLES = {"Ready": "green", "Proxying": "green", "Starting": "yellow", "Downloading": "yellow",
          "Pending": "yellow", "Failed": "red", "Skipped": "dim", "Unplaceable": "magenta",
          "Standby": "cyan", "Loading": "yellow"}
MIB = 1024 * 1024
# The first request shown (as in the README): a completion, which base models answer too.
TRY = {"model": "", "max_tokens": 32, "stop": ["\n"], "temperature": 0,
       "prompt": "Q: What is the capital of France?\nA:"}


def _detail(row: dict[str, Any]) -> RenderableType:
    progress = row.get("progress")
    if row["phase"] == "Downloading" and progress:
        done, total = progress
        label = f"{done / MIB:.0f}" + (f"/{total / MIB:.0f} MiB" if total else " MiB")
        bar = ProgressBar(total=float(total) if total else None, completed=float(done),
                          width=16)
        grid = Table.grid(padding=(0, 1))
        grid.add_row(bar, Text(label))
        return grid
    if row["phase"] in ("Ready", "Proxying", "Standby", "Loading") and row["where"] != "-":
        return Text(f"{row['where']}, {row['detail']}" if row["detail"] else row["where"])
    return Text(row["detail"])


def _status(row: dict[str, Any]) -> Text:
    return Text(row["phase"], style=STYLES.get(row["phase"], ""))


def _restarts(row: dict[str, Any]) -> Text:
    return Text(str(row["restarts"]), style="yellow" if row["restarts"] else "")


def _load(row: dict[str, Any]) -> tuple[str, str, str]:
    """(busy/slots, waiting, tokens/s) of a served model, from its llama-server's metrics."""
    load = row.get("load")
    if not load or row["phase"] != "Ready":
        return "-", "-", "-"
    return (f"{load['busy']}/{load['slots']}", str(load["waiting"]),
            f"{load['tokensPerSecond']:.0f}")


def models_table(snapshot: dict[str, Any]) -> Table:
    table = Table(box=None, header_style="bold")  # kubectl's look: no borders
    table.add_column("MODEL", overflow="fold")
    table.add_column("MODEL ID", overflow="fold")
    table.add_column("MCP TOOL", overflow="fold")
    table.add_column("STATUS", no_wrap=True)
    table.add_column("RESTARTS", justify="right", no_wrap=True)
    table.add_column("SLOTS", justify="right", no_wrap=True)  # busy / all
    table.add_column("QUEUE", justify="right", no_wrap=True)
    table.add_column("TOK/S", justify="right", no_wrap=True)
    table.add_column("DETAIL", overflow="fold", ratio=1)
    for row in snapshot["models"]:
        table.add_row(row["name"], row["modelId"], row.get("tool") or "-", _status(row),
                      _restarts(row), *_load(row), _detail(row))
    return table


def problems_text(snapshot: dict[str, Any]) -> Text | None:
    if not snapshot["problems"]:
        return None
    text = Text("Files with problems (the other models still run):\n", style="red")
    for line in snapshot["problems"]:
        text.append(f"  {line}\n")
    return text


def batches_text(snapshot: dict[str, Any]) -> Text | None:
    """The Batch API's work, when there is any: the batch being run, and how many wait."""
    batches = snapshot.get("batches")
    if not batches or not batches["unfinished"]:
        return None
    text = Text("Batches  ", style="bold")
    running = batches["running"]
    for batch in running:
        done = batch["completed"] + batch["failed"]
        text.append(f"{batch['id']} {batch['status']}: {done}/{batch['total']} requests"
                    + (f" ({batch['failed']} failed)" if batch["failed"] else "") + "; ")
    waiting = batches["unfinished"] - len(running)
    text.append(f"{waiting} waiting\n" if waiting else "none waiting\n")
    return text


def first_serving_local(snapshot: dict[str, Any]) -> str | None:
    for row in snapshot["models"]:
        if row["phase"] == "Ready":
            return str(row["modelId"])
    return None


def endpoints_text(snapshot: dict[str, Any], *, stop: str | None = None) -> Text:
    """Where to send requests, a curl command that copies as one, and how to stop.

    ``stop`` is the command that stops a stack in the background (Ctrl-C otherwise).
    """
    text = Text()
    text.append("Gateway (OpenAI API)  ", style="bold")
    text.append(f"{snapshot['gateway']}\n")
    text.append("MCP server            ", style="bold")
    text.append(f"{snapshot['mcp']}\n")
    if snapshot.get("console"):
        text.append("Web console           ", style="bold")
        text.append(f"{snapshot['console']}\n")
    text.append("Logs                  ", style="bold")
    text.append(f"{snapshot['logs']}\n")
    model = first_serving_local(snapshot)
    if model is not None:
        # JSON may break lines between its tokens, and so may a single-quoted shell word.
        body = json.dumps(TRY | {"model": model}).replace(', "prompt"', ',\n           "prompt"')
        text.append("Try:  ", style="bold")
        text.append(f"curl -s {snapshot['gateway']}/completions \\\n"
                    "        -H 'Content-Type: application/json' \\\n"
                    f"        -d '{body}'\n")
    text.append("Stop: ", style="bold")
    text.append(f"{stop}\n" if stop else "Ctrl-C\n")
    return text


def view(snapshot: dict[str, Any], *, stop: str | None = None) -> Group:
    """The whole screen: table, problems, endpoints."""
    parts: list[RenderableType] = [models_table(snapshot)]
    problems = problems_text(snapshot)
    if problems is not None:
        parts.append(problems)
    batches = batches_text(snapshot)
    if batches is not None:
        parts.append(batches)
    parts.append(endpoints_text(snapshot, stop=stop))
    return Group(*parts)


def event_line(row: dict[str, Any]) -> str:
    """One line for logs and non-terminal output when a model changes phase."""
    restarts = f" (restarts: {row['restarts']})" if row["restarts"] else ""
    detail = f": {row['detail']}" if row["detail"] else ""
    return f"{row['name']}: {row['phase']}{restarts}{detail}"
