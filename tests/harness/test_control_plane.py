"""The tests' real control plane (tests/controlplane.py) keeps its promises to the tests:
the pods they make Ready stay Ready, and a run killed outright leaves nothing running."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from controlplane import (
    PLANES,
    ControlPlane,
    proc_stat,
    started_at,
    sweep_orphaned_planes,
)

TESTS = Path(__file__).resolve().parents[1]


def test_the_pods_a_test_makes_ready_stay_ready_on_nodes_no_kubelet_runs(
        apiserver: ControlPlane) -> None:
    """The premise of test_router's replicas: the endpointslice controller publishes the
    pods a test marks Ready, and no node lifecycle controller runs. It would find every
    node here Unknown a minute in (no kubelet posts their status), and then mark NotReady
    a pod that was Ready before it saw the pod arrive: a CI run lost a router test's first
    replica so, and a pod bound Ready to a node reporting Unknown is marked NotReady
    within seconds every time it runs."""
    running = apiserver.running_controllers()
    assert "endpointslice-controller" in running
    assert "node-lifecycle-controller" not in running


# A process that owns a control plane (its etcd: the part that keeps data) and is then
# killed outright, as a test run can be; it prints the plane's pids once they run.
OWNER = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from controlplane import ControlPlane
plane = ControlPlane(Path(sys.argv[2]))
plane.register()
plane._start_etcd()
plane.wait_etcd()
print(json.dumps({"pids": [p.pid for p in plane.procs.values()],
                  "data": str(plane.etcd_data)}), flush=True)
sys.stdin.read()
"""


def _gone(pid: int) -> bool:
    """No process ``pid``, or only its zombie (its new parent has not reaped it yet)."""
    fields = proc_stat(pid)
    return fields is None or fields[0] == "Z"


def test_a_killed_runs_control_plane_is_stopped_by_the_next_one(tmp_path: Path) -> None:
    root = tmp_path / "control-plane"
    root.mkdir()
    with subprocess.Popen([sys.executable, "-c", OWNER, str(TESTS), str(root)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as owner:
        assert owner.stdout is not None
        held = json.loads(owner.stdout.readline())
        entry = ControlPlane(root).entry
        assert json.loads(entry.read_text())["pid"] == owner.pid
        assert root.absolute() not in sweep_orphaned_planes()  # its owner runs
        owner.kill()
    assert started_at(owner.pid) is None
    assert root.absolute() in sweep_orphaned_planes()
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in held["pids"]):
        assert time.monotonic() < deadline, f"{held['pids']} still run"
        time.sleep(0.05)  # processes we no longer own: nothing to wait on
    assert not Path(held["data"]).exists()
    assert not entry.exists() and PLANES.is_dir()

