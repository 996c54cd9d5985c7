"""The state directory of `llmop up`: its pid, endpoints, model table, logs and status file."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STATE_FILE = "up.json"
STATUS_FILE = "status.yaml"
LOG_DIR = "logs"
BATCH_STORE = "batches.sqlite"
RUNTIME_LOG = "up.log"


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "llmop"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmop" / "models"


def write_atomically(path: Path, text: str) -> None:
    """Readers see the old or the new content, never half of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class StateDir:
    """Where one `llmop up` keeps what `llmop status` and `llmop down` read."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / STATE_FILE

    @property
    def status_file(self) -> Path:
        return self.root / STATUS_FILE

    @property
    def logs(self) -> Path:
        return self.root / LOG_DIR

    @property
    def batches(self) -> Path:
        """The Batch API's files, batches and results (kept across restarts and `down`)."""
        return self.root / BATCH_STORE

    @property
    def runtime_log(self) -> Path:
        return self.logs / RUNTIME_LOG

    def model_log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def read(self) -> dict[str, Any] | None:
        """The running stack's snapshot, or None when none is recorded or its pid is gone."""
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("pid"), int) \
                or not alive(data["pid"]):
            return None
        return data

    def write(self, snapshot: dict[str, Any]) -> None:
        write_atomically(self.state_file, json.dumps(snapshot, indent=2))

    def write_statuses(self, statuses: dict[str, Any]) -> None:
        write_atomically(self.status_file, yaml.safe_dump(statuses, sort_keys=True))

    def clear(self) -> None:
        for path in (self.state_file, self.status_file):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
