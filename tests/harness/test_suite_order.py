"""The real-node suite's order: what waits for the node's background build runs last."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_the_modules_that_wait_for_the_background_build_run_last() -> None:
    """On a new machine the node's background build (vLLM's image, the BF16 model) ends
    ~18 minutes into a run; each real-node module that waits for it is marked `late` and
    collected after the others, so that they run meanwhile."""
    e2e = TESTS / "e2e"
    waiting = {p.name for p in e2e.glob("test_*.py") if "wait_for_images" in p.read_text()}
    assert "test_vllm.py" in waiting
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider", str(e2e)], capture_output=True,
                            text=True, check=True, cwd=TESTS.parent).stdout
    modules = list(dict.fromkeys(Path(line.split("::")[0]).name
                                 for line in listed.splitlines() if "::" in line))
    assert set(modules[-len(waiting):]) == waiting, modules
