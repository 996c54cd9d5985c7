"""docs/gateway.md's map of the package is what the code's docstrings say, and each says one."""

from __future__ import annotations

import subprocess
import sys

from samples import REPO


def test_the_gateway_map_in_the_docs_is_written_from_the_docstrings() -> None:
    checked = subprocess.run([sys.executable, str(REPO / "tools" / "gateway_map.py"),
                              "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


def test_the_gateway_top_level_holds_only_the_composition_the_errors_and_subpackages(
        ) -> None:
    top = REPO / "src" / "llm_operator" / "gateway"
    modules = sorted(p.name for p in top.glob("*.py"))
    assert modules == ["__init__.py", "app.py", "errors.py"]
    packages = sorted(p.name for p in top.iterdir() if (p / "__init__.py").exists())
    assert packages == ["flow", "inbound", "path", "providers", "routing", "server",
                        "settings", "telemetry", "upstream"]
