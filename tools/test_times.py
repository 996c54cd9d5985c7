"""Where `make test`'s pytest time went: seconds per suite, the real-node suite per module.

    .venv/bin/python tools/test_times.py .state/junit-e2e.xml .state/junit-rest.xml

Reads pytest's JUnit XML, one file per run (`make unit` writes both; each test's time
includes its setup and teardown, so a module's shared fixture counts with its first test)
and prints a Markdown table, slowest first: the figures behind docs/benchmarks.md's
breakdown.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def suite_of(classname: str) -> str:
    """``tests.e2e.test_vllm.SomeClass`` -> ``tests/e2e/test_vllm``; else ``tests/<dir>``."""
    parts = classname.split(".")
    if parts[:2] == ["tests", "e2e"] and len(parts) > 2:
        return "/".join(parts[:3])
    return "/".join(parts[:2]) if len(parts) > 2 else "/".join(parts[:1]) + " (top level)"


def main(paths: list[Path]) -> None:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for path in paths:
        if not path.is_file():
            sys.exit(f"{path}: no JUnit XML (run `make unit` first)")
    cases = (case for path in paths for case in ET.parse(path).getroot().iter("testcase"))
    for case in cases:
        suite = suite_of(case.get("classname", ""))
        seconds[suite] += float(case.get("time", 0))
        counts[suite] += 1
    total = sum(seconds.values())
    e2e = sum(s for name, s in seconds.items() if name.startswith("tests/e2e/"))
    print(f"\n>> pytest time by suite: {total / 60:.1f} min of tests, the real-node suite "
          f"(tests/e2e) {e2e / 60:.1f} min, the rest {(total - e2e) / 60:.1f} min")
    print("| suite | tests | seconds |\n|---|---|---|")
    for name in sorted(seconds, key=lambda n: -seconds[n]):
        print(f"| {name} | {counts[name]} | {seconds[name]:.0f} |")


if __name__ == "__main__":
    main([Path(a) for a in sys.argv[1:]] or [Path(".state/junit-e2e.xml"),
                                            Path(".state/junit-rest.xml")])
