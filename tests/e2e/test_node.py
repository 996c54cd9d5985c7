"""The test node's own failures: each is one line that says which part and where its log is."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_cluster import NodeCluster

from realnode import (
    IMPORTED,
    MARKER,
    Node,
    NodeError,
    archive_image,
    kill_cluster,
    node_cluster,
    node_missing,
    processes,
    sweep_stale_node,
)

from controlplane import ControlPlane

pytestmark = pytest.mark.e2e


def test_missing_debian_packages_are_named_in_one_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    reason = node_missing()
    assert reason is not None
    assert reason.startswith("missing Debian packages: apt-get install ")
    assert "runc" in reason and "dnsmasq-base" in reason and "\n" not in reason
    assert "containerd" not in reason  # not Debian's (1.6): 2.3.4 from ../shared/containerd


def test_the_node_runs_containerd_2_with_its_own_config_version(
        kube_node: NodeCluster) -> None:
    """containerd 2.3.4 (image volumes need 2.1 or newer; kubelet 1.36 deprecates 1.x), with
    a config it does not migrate at start."""
    node = kube_node.json("get", "node", "node-1")
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.3.4"
    log = (kube_node.node.root / "containerd.log").read_text()
    assert "Configuration migrated" not in log, log[-2000:]


def test_a_second_node_is_refused_and_the_first_keeps_running(
        kube_node: NodeCluster, tmp_path: Path) -> None:
    kubelets = processes("kubelet")
    with pytest.raises(NodeError, match=r"a test node already runs on this machine \(bridge "
                       r"llmop0 exists\): stop it with `make cluster-down`"), \
            node_cluster(tmp_path):
        pass
    assert processes("kubelet") == kubelets == 1
    kube_node.kubectl("wait", "--for=condition=Ready", "node/node-1", "--timeout=10s")


def test_a_part_that_is_not_up_in_time_names_its_log(tmp_path: Path) -> None:
    node = Node(ControlPlane(tmp_path / "cp"), tmp_path / "node")
    with pytest.raises(NodeError) as failure:
        node._wait("kubelet", lambda: False, 0, what="node node-1 not Ready")
    assert str(failure.value) == f"node node-1 not Ready in 0 s: see {tmp_path}/node/kubelet.log"


def test_a_running_node_is_never_swept_as_stale(kube_node: NodeCluster) -> None:
    """Only a node whose kubelet is gone (a killed run) is cleaned up before a new one."""
    assert MARKER.read_text() == str(kube_node.node.root)
    assert sweep_stale_node() is None
    assert MARKER.exists() and processes("kubelet") == 1
    kube_node.kubectl("wait", "--for=condition=Ready", "node/node-1", "--timeout=10s")


def test_a_killed_runs_etcd_is_swept_by_the_cluster_it_served(tmp_path: Path) -> None:
    """etcd keeps its data in memory, outside the cluster's directory: the sweep after a
    killed run still finds that etcd (by its data directory's name) and removes its data."""
    plane = ControlPlane(tmp_path / "cluster" / "control-plane")
    plane.root.mkdir(parents=True)
    plane._start_etcd()
    etcd = plane.procs["etcd"]
    try:
        plane.wait_etcd()  # alive: an etcd that exited on its own has no command line left
        assert plane.etcd_data.exists()
        assert kill_cluster(tmp_path / "cluster") == [etcd.pid]
        assert etcd.wait(timeout=10) == -signal.SIGKILL
        assert not plane.etcd_data.exists()
    finally:
        plane.stop()


def test_an_image_already_in_the_store_is_imported_once(
        kube_node: NodeCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """containerd's root outlives the node (IMAGE_STORE): an image there by the same config
    digest is not imported again; one the record does not vouch for is."""
    import images  # noqa: PLC0415  (tools/images.py, on sys.path in the e2e suite)

    node = kube_node.node
    archive = images.llama_image()
    tags, config = archive_image(archive)
    ctr = node._ctr
    imports: list[tuple[str, ...]] = []

    def counting(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if args[:2] == ("images", "import"):
            imports.append(args)
        return ctr(*args, **kwargs)

    monkeypatch.setattr(node, "_ctr", counting)
    assert {tag: node.imported()[tag] for tag in tags} == \
        dict.fromkeys(tags, config)  # the node's start recorded it
    node.import_image(archive)
    assert imports == []
    (node.store / IMPORTED).write_text(json.dumps({**node.imported(), tags[0]: "other"}))
    node.import_image(archive)
    assert imports == [("images", "import", str(archive))]
    assert node.imported()[tags[0]] == config
