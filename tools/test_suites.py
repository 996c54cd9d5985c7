"""`make test`: the linters and the test suites, the real-node suite beside the others.

    .venv/bin/python tools/test_suites.py [--checks] [pytest args for both...]

The real-node suite (tests/e2e) waits most of its time on pods, images and engines starting:
on 2 cores it left about 0.8 of a core idle for 25 minutes while the other suites waited for
it to start (they ran first, 10 minutes). Here the real-node suite runs in the foreground
(its output on the terminal) and the others beside it at a lower CPU priority (`nice`), so
the node's tests keep the CPU they wait on and the rest fill what they leave. With
``--checks``, ruff, mypy and import-linter (`make lint typecheck importlint`) run beside
them too, instead of a minute and more before either suite starts. The others' output goes
to .state/pytest-rest.log (the checks' to .state/checks.log) and is printed when they end;
each run's JUnit XML to .state/junit-e2e.xml and .state/junit-rest.xml, summed per suite
by tools/test_times.py. Exits non-zero when any of them fails.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STATE = REPO / ".state"
PYTEST = [sys.executable, "-m", "pytest", "-q"]
# the other suites yield the CPU to the node's (apiserver, kubelet and containerd start as
# the real-node run's children; the pods run under containerd)
REST_NICENESS = 10


def _stamp() -> str:
    return time.strftime("%T")


def _beside(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    """``argv`` at the lower CPU priority, its output to ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(["nice", "-n", str(REST_NICENESS), *argv], cwd=REPO,
                                stdout=out, stderr=subprocess.STDOUT)


def main(args: list[str]) -> int:
    checks_wanted = "--checks" in args
    extra = [a for a in args if a != "--checks"]
    STATE.mkdir(exist_ok=True)
    rest_log, checks_log = STATE / "pytest-rest.log", STATE / "checks.log"
    rest_xml, e2e_xml = STATE / "junit-rest.xml", STATE / "junit-e2e.xml"
    started = time.monotonic()
    checks = None
    if checks_wanted:
        print(f">> [{_stamp()}] ruff, mypy, import-linter beside the tests (their output: "
              f"{checks_log.relative_to(REPO)}, printed when the tests end)", flush=True)
        checks = _beside(["make", "--no-print-directory", "lint", "typecheck", "importlint"],
                         checks_log)
    print(f">> [{_stamp()}] pytest: the suites that need no node beside the real-node suite "
          f"(their output: {rest_log.relative_to(REPO)}, printed when they end)", flush=True)
    rest = _beside([*PYTEST, "--ignore=tests/e2e", f"--junitxml={rest_xml}", "-o",
                    "cache_dir=.pytest_cache/rest", *extra], rest_log)
    e2e_status = subprocess.call([*PYTEST, "tests/e2e", f"--junitxml={e2e_xml}", *extra],
                                 cwd=REPO)
    e2e_done = time.monotonic()
    rest_status = rest.wait()
    checks_status = checks.wait() if checks is not None else 0
    if checks is not None:
        print(f"\n>> the checks (exit {checks_status}):", flush=True)
        print(checks_log.read_text(), end="", flush=True)
    print(f"\n>> [{_stamp()}] the real-node suite ended after {(e2e_done - started) / 60:.1f} "
          f"min (exit {e2e_status}); the other suites, exit {rest_status}:", flush=True)
    print(rest_log.read_text(), end="", flush=True)
    subprocess.call([sys.executable, str(REPO / "tools" / "test_times.py"),
                     str(e2e_xml), str(rest_xml)], cwd=REPO)
    print(f">> pytest wall time, both runs: {(time.monotonic() - started) / 60:.1f} min")
    # pytest's 5 (no tests collected) is a failure here too: each run has tests to run
    return 0 if e2e_status == rest_status == checks_status == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
