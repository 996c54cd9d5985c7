"""`make cluster` / `make cluster-down`: the e2e suite's node cluster, by hand, in the background.

    python tests/testcluster.py up [--dir DIR]     # prints the KUBECONFIG line
    python tests/testcluster.py down [--dir DIR]

`up` starts a detached process that builds (or reuses) the images, brings up a control
plane and one real node (tests/realnode.py) with the images imported and the example's
GGUF file in place, and holds them until `down`, which stops that process: it stops exactly
the processes the cluster started. Needs root, like the node.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DIR = REPO / ".state" / "cluster"
NEXT_STEPS = """\
export KUBECONFIG={kubeconfig}
# the operator as the e2e suite installs it, then the example model:
#   kubectl apply -k tests/e2e/install
#   kubectl create namespace ai-models && kubectl apply -f examples/cluster/gemma-270m.yaml
#   (vLLM on the CPU: kubectl apply -f examples/cluster/gemma-270m-vllm.yaml)
# logs: {root}/node/*.log, {root}/control-plane/*.log; stop with `make cluster-down`"""


def serve(root: Path) -> None:
    """The cluster's own process: up, then held until SIGTERM."""
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "e2e"), str(REPO / "tools")]
    from e2e_cluster import prepare_node  # noqa: PLC0415

    from realnode import node_cluster  # noqa: PLC0415

    stop = False

    def on_term(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    for previous in ("control-plane", "node"):  # a cluster stopped before: start anew
        shutil.rmtree(root / previous, ignore_errors=True)
    now, later = prepare_node()
    with node_cluster(root, [*now, *later()]) as (plane, _node):
        (root / "kubeconfig").write_text(plane.kubeconfig.read_text())
        (root / "kubeconfig").chmod(0o600)
        (root / "ready").touch()
        while not stop:
            signal.pause()  # woken by SIGTERM from `down`


def up(root: Path, timeout: float) -> int:
    pid_file = root / "pid"
    if pid_file.exists() and _alive(int(pid_file.read_text())):
        print(NEXT_STEPS.format(kubeconfig=root / "kubeconfig", root=root))
        return 0
    root.mkdir(parents=True, exist_ok=True)
    (root / "ready").unlink(missing_ok=True)
    log = (root / "cluster.log").open("ab")
    proc = subprocess.Popen([sys.executable, __file__, "serve", "--dir", str(root)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    pid_file.write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not (root / "ready").exists():
        if proc.poll() is not None:
            tail = (root / "cluster.log").read_text(errors="replace").splitlines()[-5:]
            print("the cluster did not start:\n" + "\n".join(tail), file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            down(root)
            print(f"the cluster was not up in {timeout:.0f} s; log: {root / 'cluster.log'}",
                  file=sys.stderr)
            return 1
        time.sleep(0.2)  # another process: nothing to wait on
    print(NEXT_STEPS.format(kubeconfig=root / "kubeconfig", root=root))
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def down(root: Path, timeout: float = 120) -> int:
    pid_file = root / "pid"
    if not pid_file.exists():
        print("no cluster is running", file=sys.stderr)
        return 0
    pid = int(pid_file.read_text())
    if _alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)  # it stops its own processes first
        if _alive(pid):
            print(f"the cluster process {pid} did not stop in {timeout:.0f} s",
                  file=sys.stderr)
            return 1
    pid_file.unlink()
    (root / "ready").unlink(missing_ok=True)
    print("the cluster is stopped")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=["up", "down", "serve"])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="where the cluster keeps its files and logs (default: .state/cluster)")
    parser.add_argument("--timeout", type=float, default=900,
                        help="seconds `up` waits, image builds included (default: 900)")
    args = parser.parse_args()
    root = args.dir.resolve()
    if args.action == "serve":
        serve(root)
        return 0
    return up(root, args.timeout) if args.action == "up" else down(root)


if __name__ == "__main__":
    sys.exit(main())
