"""`make unit`: the real-node suite and the other suites as two pytest runs side by side.

    .venv/bin/python tools/test_suites.py [pytest args for both...]

The real-node suite (tests/e2e) waits most of its time on pods, images and engines starting:
on 2 cores it left about 0.8 of a core idle for 25 minutes while the other suites waited for
it to start (they ran first, 10 minutes). Here the real-node suite runs in the foreground
(its output on the terminal) and the others beside it at a lower CPU priority (`nice`), so
the node's tests keep the CPU they wait on and the rest fill what they leave. The others'
output goes to .state/pytest-rest.log and is printed when they end; each run's JUnit XML to
.state/junit-e2e.xml and .state/junit-rest.xml, summed per suite by tools/test_times.py.
Exits non-zero when either run fails.
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


def main(extra: list[str]) -> int:
    STATE.mkdir(exist_ok=True)
    rest_log = STATE / "pytest-rest.log"
    rest_xml, e2e_xml = STATE / "junit-rest.xml", STATE / "junit-e2e.xml"
    print(f">> [{_stamp()}] pytest: the suites that need no node beside the real-node suite "
          f"(their output: {rest_log.relative_to(REPO)}, printed when they end)", flush=True)
    started = time.monotonic()
    with rest_log.open("w") as log:
        rest = subprocess.Popen(
            ["nice", "-n", str(REST_NICENESS), *PYTEST, "--ignore=tests/e2e",
             f"--junitxml={rest_xml}", "-o", "cache_dir=.pytest_cache/rest", *extra],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        e2e_status = subprocess.call([*PYTEST, "tests/e2e", f"--junitxml={e2e_xml}", *extra],
                                     cwd=REPO)
        e2e_done = time.monotonic()
        rest_status = rest.wait()
    print(f"\n>> [{_stamp()}] the real-node suite ended after {(e2e_done - started) / 60:.1f} "
          f"min (exit {e2e_status}); the other suites, exit {rest_status}:", flush=True)
    print(rest_log.read_text(), end="", flush=True)
    subprocess.call([sys.executable, str(REPO / "tools" / "test_times.py"),
                     str(e2e_xml), str(rest_xml)], cwd=REPO)
    print(f">> pytest wall time, both runs: {(time.monotonic() - started) / 60:.1f} min")
    # pytest's 5 (no tests collected) is a failure here too: each run has tests to run
    return 0 if e2e_status == rest_status == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
