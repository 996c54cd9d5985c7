"""A real node beside the test control plane: containerd, kubelet, scheduler, proxy, DNS.

The recipe of ../shared/k8s/README.md, as code: a CNI bridge (``llmop0``, 10.244.0.0/24)
whose address is the node's IP and the API server's, containerd 2.3.4 (../shared/containerd,
hash-checked by tools/k8s_binaries.py; Debian's is 1.6) and Debian's runc with
the node's root under one directory, kubelet v1.36 (cgroupfs, cgroup v1), kube-scheduler,
kube-proxy (iptables) and Debian's dnsmasq answering ``<service>.<namespace>.svc.cluster.local``
(and a headless Service's pods, ``<hostname>.<service>.<namespace>.svc.cluster.local``) from a
hosts file that watches of Services and EndpointSlices keep current. Pods reach the API server
through the ``kubernetes`` Service.

Stopping kills exactly what this node started: the processes it spawned by PID, every
process in its pods' cgroup tree (``/llmop-node``), and containerd's shims for its socket;
then it unmounts what containerd and kubelet mounted under its directory, removes kube-proxy's
rules and the bridge. One node runs on a machine at a time (the bridge is the lock).

containerd's root (its images: content and unpacked snapshots) outlives the node, in the
build cache (``IMAGE_STORE``): an image already there from an earlier node, by the same
config digest, is not imported again (vLLM's alone is 2.8 GB written twice). A node that
stops removes its containers from it first; a store holding containers (a node killed
outright) is emptied at the next start and its images imported afresh.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llm_operator.local.llama_build import cache_root

from controlplane import (
    ADMIN_TOKEN,
    ControlPlane,
    binary_dir,
    free_port,
    kill_plane,
    spawn,
    stop_process,
)

BRIDGE = "llmop0"
NODE_IP = "10.244.0.1"
POD_SUBNET = "10.244.0.0/24"
CLUSTER_CIDR = "10.244.0.0/16"
CGROUP_ROOT = "llmop-node"
NODE_NAME = "node-1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CLUSTER_DOMAIN = "cluster.local"

# What the node runs, and the Debian package that brings it (containerd itself is 2.3.4 from
# ../shared/containerd, unpacked beside the Kubernetes binaries: Debian's is 1.6).
PACKAGES = {
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins", "iptables": "iptables",
    "conntrack": "conntrack", "dnsmasq": "dnsmasq-base", "ip": "iproute2",
}
NODE_BINARIES = ("kubelet", "kube-scheduler", "kube-proxy", "containerd",
                 "containerd-shim-runc-v2", "ctr")
MARKER = Path("/run/llmop-node")  # the running node's directory (sweep_stale_node)
IMAGE_STORE = cache_root() / "node-images"  # containerd's root, kept between nodes
IMPORTED = "imported.json"  # in IMAGE_STORE: each tag and the config digest imported for it


class NodeError(RuntimeError):
    """The node cannot start here; the message says which part and where its logs are."""


def node_missing() -> str | None:
    """Why a node cannot start on this machine (None when it can), in one line."""
    if os.geteuid() != 0:
        return "a node needs root (containerd, kubelet and the CNI bridge)"
    absent = sorted({pkg for tool, pkg in PACKAGES.items()
                     if not (Path(tool).exists() if tool.startswith("/") else shutil.which(tool))})
    if absent:
        return f"missing Debian packages: apt-get install {' '.join(absent)}"
    for name in NODE_BINARIES:
        if not (binary_dir() / name).exists():
            return f"{binary_dir() / name} is missing: run `make tools`"
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        return (f"a test node already runs on this machine (bridge {BRIDGE} exists): "
                "stop it with `make cluster-down`")
    return None


def processes(name: str) -> int:
    """How many processes on this machine run the command ``name`` (a process that exits
    while /proc is read is not counted)."""
    return sum(1 for p in Path("/proc").iterdir()
               if p.name.isdigit() and _read(p / "comm").strip() == name)


def sweep_stale_node() -> Path | None:
    """Clean up after a node whose test run was killed (its directory, or None).

    A run killed outright (SIGKILL, a session stopped) leaves the bridge, iptables rules,
    mounts and cgroups, and perhaps containerd, the API server or etcd: the next run would
    refuse to start. MARKER names the node's directory while one runs; with no kubelet
    alive, every process that names the cluster's directory is killed and the node's
    teardown runs for it.
    """
    if not MARKER.exists() or processes("kubelet"):
        return None
    root = Path(MARKER.read_text().strip())
    kill_cluster(root.parent)
    Node(ControlPlane(root.parent / "control-plane"), root).stop()
    return root


def kill_cluster(cluster: Path) -> list[int]:
    """SIGKILL every process of the test cluster in ``cluster`` (the node's and the control
    plane's: their command lines name ``cluster``, or etcd's data directory, which lives in
    memory and is named after the control plane); remove etcd's data; the pids killed."""
    return kill_plane(cluster / "control-plane", str(cluster))


def _run(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and result.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


# containerd 2.3.4's own config version (4; a version 2 or 3 file is migrated at every start,
# with a warning). Its servers (grpc, ttrpc, metrics) and the CRI plugin's parts
# (io.containerd.cri.v1.images/runtime) are plugins: top-level [grpc] is ignored in 4.
CONTAINERD_CONFIG = """\
version = 4
root = "{store}/root"
state = "{root}/containerd/state"
[debug]
  level = "warn"
[plugins."io.containerd.server.v1.grpc"]
  address = "{root}/containerd.sock"
[plugins."io.containerd.server.v1.ttrpc"]
  address = "{root}/containerd.sock.ttrpc"
[plugins."io.containerd.server.v1.metrics"]
  address = ""
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_unprivileged_ports = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{root}/cni"
"""


def cni_config() -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0", "name": "llmop-node",
        "plugins": [
            {"type": "bridge", "bridge": BRIDGE, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_SUBNET,
                                                         "gateway": NODE_IP}]],
                      "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "{root}/cni-ipam"}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
            {"type": "loopback"},
        ],
    }


@dataclass
class Node:
    """One real node for ``plane`` (built with ``address=NODE_IP``); see the module doc."""

    plane: ControlPlane
    root: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _importing: threading.Thread | None = None
    _import_error: list[BaseException] = field(default_factory=list)
    store: Path = IMAGE_STORE
    _recording: threading.Lock = field(default_factory=threading.Lock)

    @property
    def socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def hosts_file(self) -> Path:
        return self.root / "dns" / "hosts"

    # --- start -------------------------------------------------------------------------

    def start(self, images: list[Path], timeout: float = 90,
              later: Callable[[], list[Path]] | None = None) -> None:
        """Bridge, containerd (with ``images`` imported), kubelet, scheduler, proxy, DNS.

        ``later`` builds more images, which are imported in the background while the node
        starts and the first tests run (vLLM's: minutes to build on a new machine, a minute
        of disk writes to import): `wait_for_images` before using them.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        self._start_containerd()
        for image in images:
            self.import_image(image)
        if later:
            self._importing = threading.Thread(target=self._import_later, args=(later,),
                                               name="image-import", daemon=True)
            self._importing.start()
        self._start_dns()
        self._start_kubelet()
        self._spawn("kube-scheduler", [
            str(binary_dir() / "kube-scheduler"), f"--kubeconfig={self.plane.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--leader-elect=false"])
        self._start_proxy()
        self.wait_node_ready(timeout)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        spawn(self.procs, self.root, name, argv, new_session=True, env=env)

    def make_bridge(self) -> None:
        """The node's network, before the API server: it listens on the bridge address."""
        MARKER.write_text(str(self.root))
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
        _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
        _run("ip", "link", "set", BRIDGE, "up")
        for key, value in (("net/ipv4/ip_forward", "1"),
                           ("net/bridge/bridge-nf-call-iptables", "1")):
            with contextlib.suppress(OSError):
                Path("/proc/sys", key).write_text(value)

    def _start_containerd(self) -> None:
        (self.root / "cni").mkdir(exist_ok=True)
        conf = json.dumps(cni_config()).replace("{root}", str(self.root))
        (self.root / "cni" / "10-llmop.conflist").write_text(conf)
        config = self.root / "containerd.toml"
        config.write_text(CONTAINERD_CONFIG.format(root=self.root, store=self.store,
                                                   pause=PAUSE_IMAGE))
        self._spawn_containerd(config)
        if self._ctr("containers", "ls", "-q").stdout.split():
            # a node killed outright left its containers: kubelet would meet them as pods
            # of its own; start from an empty store instead (the images are imported again)
            print(f"the image store {self.store} holds a killed node's containers: "
                  "emptied", file=sys.stderr)
            stop_process(self.procs, "containerd")
            self._kill_shims()
            self._unmount()
            shutil.rmtree(self.store)
            self._spawn_containerd(config)

    def _spawn_containerd(self, config: Path) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        # its shim is looked up on PATH: the one beside it first
        self._spawn("containerd", [str(binary_dir() / "containerd"), "--config", str(config)],
                    env={**os.environ, "PATH": f"{binary_dir()}:{os.environ['PATH']}"})
        self._wait("containerd", lambda: self.socket.exists() and self._ctr(
            "version", check=False).returncode == 0, 30)

    def _ctr(self, *args: str, check: bool = True, timeout: float = 60
             ) -> subprocess.CompletedProcess[str]:
        return _run(str(binary_dir() / "ctr"), "--address", str(self.socket), "-n", "k8s.io",
                    *args, check=check, timeout=timeout)

    def _import_later(self, build: Callable[[], list[Path]]) -> None:
        try:
            for archive in build():
                self.import_image(archive)
        except BaseException as exc:  # raised again by wait_for_images
            self._import_error.append(exc)

    def wait_for_images(self, timeout: float = 600) -> None:
        """Until the images started with ``later`` are imported (raises what failed)."""
        if self._importing is not None:
            self._importing.join(timeout)
            if self._importing.is_alive():
                raise NodeError(f"images still importing after {timeout} s")
        if self._import_error:
            raise self._import_error[0]

    def import_image(self, archive: Path) -> None:
        """Import a docker-archive tar (tools/images.py builds them) into the node, unless
        the image store has each of its tags already, imported from the same config.

        vLLM's (2.8 GB) is written twice, as blobs and unpacked: a minute and more.
        """
        tags, config = archive_image(archive)
        present = set(self._ctr("images", "ls", "-q").stdout.split())
        imported = self.imported()
        if all(imported.get(tag) == config and tag in present for tag in tags):
            return
        self._ctr("images", "import", str(archive), timeout=600)
        with self._recording:  # the background import records beside the first ones
            partial = self.store / f"{IMPORTED}.partial"  # a killed run leaves no half file
            partial.write_text(json.dumps({**self.imported(), **dict.fromkeys(tags, config)}))
            partial.replace(self.store / IMPORTED)

    def imported(self) -> dict[str, str]:
        """Each tag imported into the image store and the config digest it was imported
        from (IMPORTED; empty for a new store)."""
        record = self.store / IMPORTED
        return json.loads(record.read_text()) if record.exists() else {}

    def _forget_containers(self) -> None:
        """Remove every container (and its snapshot) from the image store, which outlives
        this node: after its pods are killed, before containerd stops."""
        if "containerd" not in self.procs or self.procs["containerd"].poll() is not None:
            return
        for kind in ("tasks", "containers"):
            ids = self._ctr(kind, "ls", "-q", check=False).stdout.split()
            if ids:
                self._ctr(kind, "rm", *(["-f"] if kind == "tasks" else []), *ids,
                          check=False, timeout=120)

    def _start_dns(self) -> None:
        self.hosts_file.parent.mkdir(exist_ok=True)
        self.hosts_file.write_text("")
        self._spawn("dnsmasq", [
            "dnsmasq", "--keep-in-foreground", "--no-resolv", "--no-hosts", "--no-negcache",
            "--bind-interfaces", f"--listen-address={NODE_IP}", "--except-interface=lo",
            f"--addn-hosts={self.hosts_file}", f"--pid-file={self.root / 'dns' / 'pid'}",
            "--local-service", "--log-facility=-", f"--local=/{CLUSTER_DOMAIN}/",
            "--user=root"])  # its hosts file lies in a directory only root may read
        self._wait("dnsmasq", (self.root / "dns" / "pid").exists, 10)
        records: dict[str, dict[str, str]] = {}  # object -> its names and addresses
        lock = threading.Lock()
        for path, names in (("/api/v1/services", _service_names),
                            ("/apis/discovery.k8s.io/v1/endpointslices", _pod_names)):
            threading.Thread(target=self._feed_dns, args=(path, names, records, lock),
                             name=f"dns-feed {path}", daemon=True).start()

    def _feed_dns(self, path: str, names: Callable[[dict[str, Any]], dict[str, str]],
                  records: dict[str, dict[str, str]], lock: threading.Lock) -> None:
        """Keep ``records`` of one kind equal to the cluster's (a watch, relisted) and the
        hosts file equal to ``records``: Services' cluster IPs, and, as CoreDNS answers
        them, the pods a headless Service names (``<hostname>.<service>.<namespace>``: a
        LeaderWorkerSet's group finds its leader by one)."""
        context = ssl.create_default_context(cafile=str(self.plane.ca_file))

        def update(key: str, found: dict[str, str] | None) -> None:
            with lock:
                if found:
                    records[key] = found
                else:
                    records.pop(key, None)
                self._write_hosts(records)

        while not self._stopping.is_set():
            try:
                listing = self._get(path, context)
                with lock:
                    for key in [k for k in records if k.startswith(path)]:
                        del records[key]
                    records.update((path + _dns_key(o), names(o)) for o in listing["items"])
                    self._write_hosts(records)
                version = listing["metadata"]["resourceVersion"]
                request = urllib.request.Request(
                    f"{self.plane.server}{path}?watch=1&resourceVersion={version}"
                    "&timeoutSeconds=300", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
                with urllib.request.urlopen(request, context=context, timeout=330) as stream:
                    for line in stream:
                        if self._stopping.is_set():
                            return
                        event = json.loads(line)
                        if event["type"] == "ERROR":
                            break
                        obj = event["object"]
                        update(path + _dns_key(obj),
                               None if event["type"] == "DELETED" else names(obj))
            except (OSError, ValueError, KeyError):
                self._stopping.wait(0.5)  # the API server restarts or stops: retry

    def _get(self, path: str, context: ssl.SSLContext) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.plane.server}{path}",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        with urllib.request.urlopen(request, context=context, timeout=30) as r:
            return json.loads(r.read())  # type: ignore[no-any-return]

    def _write_hosts(self, records: dict[str, dict[str, str]]) -> None:
        lines = sorted(f"{ip} {name}.svc.{CLUSTER_DOMAIN}\n"
                       for found in records.values() for name, ip in found.items())
        partial = self.hosts_file.with_suffix(".partial")
        partial.write_text("".join(lines))
        os.replace(partial, self.hosts_file)
        proc = self.procs.get("dnsmasq")
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGHUP)

    def _make_cgroups(self) -> None:
        """The pods' cgroup root in every v1 hierarchy (cpuset: with its parent's CPUs)."""
        for hierarchy in Path("/sys/fs/cgroup").iterdir():
            if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
                continue
            top = hierarchy / CGROUP_ROOT
            top.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (top / knob).exists() and not _read(top / knob).strip():
                    (top / knob).write_text(_read(hierarchy / knob))

    def _start_kubelet(self) -> None:
        self._make_cgroups()
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs", "cgroupRoot": f"/{CGROUP_ROOT}",
            "failCgroupV1": False, "failSwapOn": False,
            "address": NODE_IP, "port": free_port(), "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": free_port(),
            "clusterDNS": [NODE_IP], "clusterDomain": CLUSTER_DOMAIN,
            "resolvConf": str(self._resolv_conf()),
            "authentication": {"x509": {"clientCAFile": str(self.plane.ca_file)},
                               "anonymous": {"enabled": False},
                               "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "registerNode": True,
            "nodeStatusUpdateFrequency": "2s", "syncFrequency": "5s",
            "fileCheckFrequency": "5s", "rotateCertificates": False,
            "localStorageCapacityIsolation": True,
        }
        path = self.root / "kubelet.yaml"
        path.write_text(json.dumps(config))
        self._spawn("kubelet", [
            str(binary_dir() / "kubelet"), f"--config={path}",
            f"--kubeconfig={self.plane.kubeconfig}", f"--root-dir={self.root / 'kubelet'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={NODE_IP}",
            f"--cert-dir={self.root / 'kubelet-pki'}", "--v=1"])

    def _resolv_conf(self) -> Path:
        """What pods get beside the cluster DNS: nothing outside (no search domains)."""
        path = self.root / "resolv.conf"
        path.write_text(f"nameserver {NODE_IP}\n")
        return path

    def _start_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.plane.kubeconfig)},
            "mode": "iptables", "clusterCIDR": CLUSTER_CIDR,
            "bindAddress": "127.0.0.1",
            "healthzBindAddress": f"127.0.0.1:{free_port()}",
            "metricsBindAddress": f"127.0.0.1:{free_port()}",
            "nodePortAddresses": [POD_SUBNET],
            "conntrack": {"maxPerCore": 0},  # leave the machine's conntrack table alone
            "iptables": {"syncPeriod": "10s", "minSyncPeriod": "0s"},
        }
        path = self.root / "kube-proxy.yaml"
        path.write_text(json.dumps(config))
        self._spawn("kube-proxy", [str(binary_dir() / "kube-proxy"), f"--config={path}",
                                   f"--hostname-override={NODE_NAME}"])

    def _wait(self, name: str, check: Any, timeout: float, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not check():
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is not None:
                raise NodeError(f"{name} exited ({proc.returncode}): see "
                                f"{self.root / (name + '.log')}")
            if time.monotonic() > deadline:
                raise NodeError(f"{what or name + ' not up'} in {timeout:.0f} s: see "
                                f"{self.root / (name + '.log')}")
            time.sleep(0.1)  # a process we do not control: nothing to wait on

    def wait_node_ready(self, timeout: float) -> None:
        def ready() -> bool:
            status, node = self.plane.request("GET", f"/api/v1/nodes/{NODE_NAME}")
            conditions = {c["type"]: c["status"]
                          for c in (node or {}).get("status", {}).get("conditions", [])} \
                if status == 200 else {}
            return conditions.get("Ready") == "True"
        for name in ("kubelet", "kube-proxy", "kube-scheduler"):
            proc = self.procs[name]
            if proc.poll() is not None:
                raise NodeError(f"{name} exited ({proc.returncode}): see "
                                f"{self.root / (name + '.log')}")
        self._wait("kubelet", ready, timeout, what=f"node {NODE_NAME} not Ready")

    # --- stop --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop everything this node started; see the module doc.

        Every step runs even if one before it failed (a teardown that stopped half-way once
        left containerd, the API server and the bridge running); the first failure is
        raised at the end.
        """
        self._stopping.set()
        steps: list[Callable[[], object]] = [
            *(functools.partial(stop_process, self.procs, name)
              for name in ("kube-proxy", "kube-scheduler", "kubelet", "dnsmasq")),
            self._kill_pods,
            self._forget_containers,
            functools.partial(stop_process, self.procs, "containerd"),
            self._kill_shims,
            self._unmount,
            lambda: _run(str(binary_dir() / "kube-proxy"), "--cleanup", check=False),
            self._remove_kubelet_chains,
            lambda: _run("ip", "link", "del", BRIDGE, check=False),
            self._remove_cgroups,
            functools.partial(MARKER.unlink, missing_ok=True),
        ]
        failures: list[Exception] = []
        for step in steps:
            try:
                step()
            except Exception as exc:  # the next steps must run all the same
                failures.append(exc)
        if failures:
            raise failures[0]

    def signal_in_pod(self, pod_uid: str, program: str, sig: int) -> list[int]:
        """Send ``sig`` to pod ``pod_uid``'s processes whose command line names ``program``
        (a crash, or the kernel's OOM killer, as a container sees it); their pids."""
        pids = {int(p) for top in self._cgroup_dirs() for d in _subtree(top)
                if f"pod{pod_uid}" in d.parts[-2:] or d.name == f"pod{pod_uid}"
                for p in _read(d / "cgroup.procs").split()}
        hit = []
        for pid in sorted(pids):
            if program in _read(Path(f"/proc/{pid}/cmdline")):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
                    hit.append(pid)
        return hit

    @staticmethod
    def _cgroup_dirs() -> list[Path]:
        return [d for d in Path("/sys/fs/cgroup").glob(f"*/{CGROUP_ROOT}") if d.is_dir()]

    def _kill_pods(self) -> None:
        """SIGKILL every process in the pods' cgroup tree, until it is empty."""
        for _ in range(20):
            pids = {int(p) for top in self._cgroup_dirs() for d in _subtree(top)
                    for p in _read(d / "cgroup.procs").split()}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.05)  # the kernel reaps them asynchronously

    def _kill_shims(self) -> None:
        """containerd-shim-runc-v2 processes outlive containerd: end this node's."""
        marker = str(self.socket).encode()
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                cmdline = (proc / "cmdline").read_bytes()
                if b"containerd-shim" in cmdline and marker in cmdline:
                    os.kill(int(proc.name), signal.SIGKILL)

    def _unmount(self) -> None:
        roots = (str(self.root), str(self.store))
        mounts = [line.split()[4] for line in _read(Path("/proc/self/mountinfo")).splitlines()]
        for point in sorted((m for m in mounts if m.startswith(roots)), key=len, reverse=True):
            _run("umount", "-l", point, check=False)

    @staticmethod
    def _remove_kubelet_chains() -> None:
        """What the kubelet adds to iptables (KUBE-FIREWALL, canaries, hints), which
        kube-proxy's --cleanup leaves: the rules that jump to them, then the chains."""
        for table in ("filter", "nat", "mangle"):
            listing = _run("iptables", "-t", table, "-S", check=False).stdout.splitlines()
            for rule in listing:
                words = shlex.split(rule)
                if words[0] == "-A" and not words[1].startswith("KUBE-") and \
                        "-j" in words and words[words.index("-j") + 1].startswith("KUBE-"):
                    _run("iptables", "-t", table, "-D", *words[1:], check=False)
            chains = [line.split()[1] for line in listing if line.startswith("-N KUBE-")]
            for chain in chains:
                _run("iptables", "-t", table, "-F", chain, check=False)
            for chain in chains:
                _run("iptables", "-t", table, "-X", chain, check=False)

    def _remove_cgroups(self) -> None:
        for top in self._cgroup_dirs():
            for d in _subtree(top):  # deepest first
                with contextlib.suppress(OSError):
                    d.rmdir()


def archive_image(archive: Path) -> tuple[list[str], str]:
    """A docker-archive's tags and its image's config digest (its manifest.json)."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("manifest.json")
        if member is None:
            raise NodeError(f"{archive}: no manifest.json (not a docker-archive tar)")
        (manifest,) = json.load(member)
    return list(manifest["RepoTags"]), str(manifest["Config"]).removesuffix(".json")


def _subtree(top: Path) -> list[Path]:
    """``top`` and every directory below it, deepest first.

    The kubelet and runc remove cgroups while this walks them: a directory that vanishes
    is skipped, never an error (a teardown once failed on one).
    """
    found = [Path(root) for root, _, _ in os.walk(top, topdown=False, onerror=lambda _: None)]
    return found or [top]


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _dns_key(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{meta['name']}.{meta['namespace']}"


def _service_names(service: dict[str, Any]) -> dict[str, str]:
    """``<service>.<namespace>`` -> the Service's cluster IP (none for a headless one)."""
    ip = service["spec"].get("clusterIP", "")
    return {_dns_key(service): ip} if ip and ip != "None" else {}


def _pod_names(slice_: dict[str, Any]) -> dict[str, str]:
    """``<hostname>.<service>.<namespace>`` -> address, for the endpoints of a headless
    Service that carry a hostname (a pod whose subdomain is the Service's name); ready ones,
    and all of them when the Service publishes not-ready addresses (the slice says ready)."""
    meta = slice_["metadata"]
    service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
    found = {}
    for endpoint in slice_.get("endpoints") or []:
        ready = (endpoint.get("conditions") or {}).get("ready", True)
        if service and endpoint.get("hostname") and endpoint.get("addresses") and ready:
            name = f"{endpoint['hostname']}.{service}.{meta['namespace']}"
            found[name] = endpoint["addresses"][0]
    return found


@contextlib.contextmanager
def node_cluster(root: Path | None = None, images: list[Path] | None = None,
                 timeout: float = 90, *, controllers: bool = True,
                 later: Callable[[], list[Path]] | None = None
                 ) -> Iterator[tuple[ControlPlane, Node]]:
    """A control plane and one real node, stopped (exactly their processes) when it ends.

    Without ``controllers`` the controller manager is left for the caller to start (after
    installing CRDs, so that its garbage collector knows them from the start). ``later``
    builds images that are imported in the background (`Node.wait_for_images`).
    """
    swept = sweep_stale_node()
    if swept is not None:
        print(f"swept the remains of a node whose run was killed: {swept}", file=sys.stderr)
    reason = node_missing()
    if reason:
        raise NodeError(reason)
    base = root or Path(tempfile.mkdtemp(prefix="llmop-node-"))
    plane = ControlPlane(base / "control-plane", address=NODE_IP)
    plane.root.mkdir(parents=True, exist_ok=True)
    node = Node(plane, base / "node")
    try:
        node.make_bridge()
        plane.start(controllers=controllers)
        node.start(images or [], timeout, later)
        yield plane, node
    finally:
        try:
            node.stop()
        finally:
            plane.stop()
