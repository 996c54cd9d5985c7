#!/usr/bin/env python3
"""Condense `pip install -v` output to progress lines; keep the whole output in a log file.

Usage: pip install -v ... 2>&1 | python tools/install_progress.py LOGFILE
llama.cpp compiles for several minutes on a small machine; this shows how far it is
instead of either silence or thousands of compiler lines. On failure, the caller prints
the log's tail.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

STEP = re.compile(rb"^\s*\[(\d+)/(\d+)\]")
NOTE = re.compile(rb"^(Building wheel for|Successfully installed|ERROR)")
EVERY_SECONDS = 15.0


def main(log_path: str) -> int:
    tty = sys.stdout.isatty()
    last_shown = 0.0
    started = time.monotonic()
    with Path(log_path).open("wb") as log:
        for line in sys.stdin.buffer:
            log.write(line)
            step = STEP.match(line)
            if step:
                done, total = int(step.group(1)), int(step.group(2))
                now = time.monotonic()
                if tty or now - last_shown >= EVERY_SECONDS or done == total:
                    last_shown = now
                    text = (f"   compiling llama.cpp: step {done}/{total} "
                            f"({100 * done // total}%, {now - started:.0f}s)")
                    sys.stdout.write(f"\r{text}" if tty else f"{text}\n")
                    sys.stdout.flush()
            elif NOTE.match(line):
                if tty:
                    sys.stdout.write("\n")
                sys.stdout.write("   " + line.decode(errors="replace").strip()[:160] + "\n")
                sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "pip-install.log"))
