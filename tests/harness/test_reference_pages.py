"""The reference pages written from the code are what the code says today."""

from __future__ import annotations

import subprocess
import sys

import pytest

from samples import REPO


@pytest.mark.parametrize("tool", ["metrics_reference.py", "cli_reference.py", "api_reference.py",
                                  "config_reference.py", "gateway_map.py"])
def test_a_generated_page_is_up_to_date(tool: str) -> None:
    checked = subprocess.run([sys.executable, str(REPO / "tools" / tool), "--check"],
                             capture_output=True, text=True, check=False)
    assert checked.returncode == 0, f"{checked.stderr}(run tools/{tool})"
