"""The real-node suite's order: what waits for the node's background build runs as soon as
the build is ready, else last."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from suite_order import run_order

TESTS = Path(__file__).resolve().parents[1]


def test_the_modules_that_wait_for_the_background_build_are_collected_last() -> None:
    """On a new machine the node's background build (vLLM's image, the BF16 model) ends
    ~17 minutes into a run; each real-node module that waits for it is marked `late` and
    collected after the others: where it runs if the build is not ready before them."""
    e2e = TESTS / "e2e"
    waiting = {p.name for p in e2e.glob("test_*.py") if "wait_for_images" in p.read_text()}
    assert "test_vllm.py" in waiting
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider", str(e2e)], capture_output=True,
                            text=True, check=True, cwd=TESTS.parent).stdout
    modules = list(dict.fromkeys(Path(line.split("::")[0]).name
                                 for line in listed.splitlines() if "::" in line))
    assert set(modules[-len(waiting):]) == waiting, modules


# (case, modules as collected: "L" waits for the build, answers of ready() in turn, the run)
ORDERS = [
    ("never ready: as collected", ["a1 a2", "b1", "L1 L2", "M1"], [False] * 9,
     "a1 a2 b1 L1 L2 M1"),
    ("ready after the first module", ["a1 a2", "b1", "L1 L2", "M1"], [False, True, True, True],
     "a1 a2 L1 L2 M1 b1"),
    ("ready at the first module's last item only", ["a1 a2", "b1 b2", "L1"],
     [False, True, False, False], "a1 a2 L1 b1 b2"),
    ("ready later", ["a1", "b1", "c1", "L1", "M1"], [False, False, True, True, True],
     "a1 b1 L1 M1 c1"),
    ("only waiting modules", ["L1 L2", "M1"], [False, False], "L1 L2 M1"),
    ("no waiting module", ["a1", "b1 b2"], [True] * 3, "a1 b1 b2"),
]


@pytest.mark.parametrize(("case", "modules", "answers", "run"), ORDERS,
                         ids=[o[0] for o in ORDERS])
def test_a_waiting_module_runs_at_the_first_boundary_where_the_build_is_ready(
        case: str, modules: list[str], answers: list[bool], run: str) -> None:
    said = iter(answers)
    pairs = list(run_order([m.split() for m in modules],
                           lambda module: module[0].isupper(), lambda: next(said)))
    assert " ".join(item for item, _ in pairs) == run
    # each item's nextitem is the item that runs after it: module fixtures end where due
    assert [nextitem for _, nextitem in pairs] == [item for item, _ in pairs[1:]] + [None]


def test_empty_modules_are_skipped() -> None:
    modules: Sequence[list[str]] = [[], ["a"], []]
    assert list(run_order(modules, lambda m: False, lambda: True)) == [("a", None)]
