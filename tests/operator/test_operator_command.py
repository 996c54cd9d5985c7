"""`llmop operator` as a process on the real API server: how it stops.

In a pod the operator is PID 1, which ignores SIGTERM unless it handles it; on the test
node a deleted leader kept renewing its Lease until SIGKILL. The command must stop on
SIGTERM and hand the Lease back, so the standby takes over at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from controlplane import ControlPlane

LLMOP = str(Path(sys.executable).parent / "llmop")


def test_sigterm_stops_the_leader_and_hands_the_lease_back(apiserver: ControlPlane) -> None:
    namespace = f"op-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", namespace)
    proc = subprocess.Popen(
        [LLMOP, "operator", "-n", namespace, "--leader-elect", "--lease-namespace", namespace],
        env={**os.environ, "KUBECONFIG": str(apiserver.kubeconfig), "POD_NAME": "op-1"},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        apiserver.kubectl("-n", namespace, "wait", "--for=create", "lease/llm-operator",
                          "--timeout=30s")
        apiserver.kubectl("-n", namespace, "wait", "lease/llm-operator", "--timeout=30s",
                          "--for=jsonpath={.spec.holderIdentity}=op-1")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, output
    holder = apiserver.kubectl("-n", namespace, "get", "lease", "llm-operator", "-o",
                               "jsonpath={.spec.holderIdentity}").stdout
    assert holder == "", output
    assert "released the Lease" in output
