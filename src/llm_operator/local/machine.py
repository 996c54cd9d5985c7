"""The machine `llmop up` runs on: CPU cores, RAM and the accelerators present."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from llm_operator.local.placement import Machine

# Device nodes each vendor's driver creates (checked without loading any vendor library).
DEVICE_MARKERS = {
    "nvidia": ("/dev/nvidia0", "/dev/nvidiactl"),
    "amd": ("/dev/kfd",),
    "intel-gaudi": ("/dev/accel/accel0", "/dev/hl0"),
}


def memory_gib(meminfo: Path = Path("/proc/meminfo"), field: str = "MemTotal") -> float:
    """RAM in GiB (Linux: /proc/meminfo's ``field``); elsewhere the physical page count."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    except (ValueError, OSError):
        return 0.0


def cpus() -> int:
    """Cores this process may run on (respects taskset and container CPU sets)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def accelerators() -> frozenset[str]:
    found = {vendor for vendor, nodes in DEVICE_MARKERS.items()
             if any(Path(node).exists() for node in nodes)}
    if shutil.which("nvidia-smi"):
        found.add("nvidia")
    return frozenset(found)


def detect() -> Machine:
    total = memory_gib()
    return Machine(cpus=cpus(), memory_gib=total, accelerators=accelerators(),
                   available_gib=memory_gib(field="MemAvailable"))
