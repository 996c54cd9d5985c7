"""Helpers to run Debian's promtool on the project's rules (installed by `make test`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "config" / "monitoring" / "prometheus-rules.yaml"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        raise FileNotFoundError("promtool not found: `make test` installs it as root "
                                "(apt-get install prometheus)")
    return path


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["spec"]["groups"]
    return groups


def write_rules(directory: Path, groups: list[dict[str, Any]] | None = None) -> Path:
    target = directory / "rules.yaml"
    target.write_text(yaml.safe_dump({"groups": groups or rule_groups()}, sort_keys=False))
    return target


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)
