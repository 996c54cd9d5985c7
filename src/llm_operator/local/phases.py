"""A model's phases on this machine, and what the API and the MCP server read of them."""

from __future__ import annotations

from typing import Any

# Phases a model passes through here; the API's phases where one fits.
UNSETTLED = frozenset({"Pending", "Downloading", "Starting"})
# a pool's member that is not loaded, or loading, is served: its pool loads it on demand
SERVING = frozenset({"Ready", "Proxying", "Standby", "Loading"})
LOADING_PHASES = frozenset({"Starting", "Downloading"})
API_PHASE = {"Skipped": "Pending", "Unplaceable": "Failed", "Standby": "Ready",
             "Loading": "Ready"}


def statuses(snapshot: dict[str, Any], endpoint: str) -> dict[str, Any]:
    """The status file the MCP server reads: serving models point at ``endpoint``."""
    out = {}
    for row in snapshot["models"]:
        status: dict[str, Any] = {"phase": API_PHASE.get(row["phase"], row["phase"])}
        if row["phase"] in SERVING:
            status["endpoint"] = endpoint
        out[row["name"]] = status
    return out
