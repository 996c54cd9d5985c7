"""Real-node benchmark: scale from zero to first token, images prefetched against pulled on demand.

On the test node (tests/realnode.py; needs root), from a real registry on the node's host:
Debian's `docker-registry` (distribution 2.8) on 127.0.0.1:5000, which containerd reaches
over plain HTTP as it does any loopback registry, holding the llama-server image and the
Gemma 3 270M model image (`llmop model-image`), pushed with Debian's `skopeo`. The model is
examples/cluster/gemma-270m-image.yaml with its images renamed to the registry's, rendered
by `llmop render` with the e2e install's settings but `imagePullPolicy: IfNotPresent`, and
applied with kubectl at zero replicas. Each scenario starts with neither image on the node
(`ctr images rm --sync`: the content is collected), then:

- **on demand** (the baseline): scale the Deployment to 1; the kubelet pulls both images
  for the new pod, then the engine loads.
- **prefetched**: the model's prefetch DaemonSet (scaling.prefetchImages) runs first and
  pulls both (timed apart); then scale to 1.

Measured from the scale request to the first completion through the model's Service.

    sudo python bench/prefetch/run.py [--runs 1]

Needs `apt-get install docker-registry skopeo` (done here when run as root).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "src"), str(REPO / "tests"), str(REPO / "tests" / "e2e"),
                str(REPO / "tools")]

import images  # noqa: E402
import openai  # noqa: E402
import yaml  # noqa: E402
from e2e_cluster import GEMMA_FILE, INSTALL, MODELS_NS, NodeCluster, installed  # noqa: E402

REGISTRY = "127.0.0.1:5000"
ENGINE = f"{REGISTRY}/llmop/llama-server:{images.LLAMA_TAG.rsplit(':', 1)[1]}"
MODEL = f"{REGISTRY}/models/gemma-3-270m:q4_k_m"
EXAMPLE = REPO / "examples" / "cluster" / "gemma-270m-image.yaml"
NAME = "gemma-prefetch"
LLMOP = str(Path(sys.executable).with_name("llmop"))
QUESTION = "Q: What is the capital of France?\nA:"


def need_tools() -> None:
    missing = [p for p, tool in (("docker-registry", "docker-registry"), ("skopeo", "skopeo"))
               if shutil.which(tool) is None]
    if missing:
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                       env={"DEBIAN_FRONTEND": "noninteractive", "PATH": "/usr/bin:/bin"})


@contextlib.contextmanager
def registry(root: Path) -> Iterator[None]:
    """docker-registry on 127.0.0.1:5000, storage under ``root``, until the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "data")}},
        "http": {"addr": REGISTRY}}))
    proc = subprocess.Popen(["docker-registry", "serve", str(config)],
                            stdout=subprocess.DEVNULL, stderr=(root / "registry.log").open("w"))
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"http://{REGISTRY}/v2/", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the registry did not answer: "
                                       f"{root / 'registry.log'}") from None
                time.sleep(0.2)  # it opens its port a moment after it starts
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def push(archive: Path, ref: str) -> None:
    subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false",
                    f"docker-archive:{archive}", f"docker://{ref}"], check=True)


def rendered(root: Path) -> list[dict[str, Any]]:
    """The example with the registry's images, at zero replicas, as `llmop render` makes it."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["metadata"]["name"] = NAME
    doc["spec"]["modelSource"]["ociImage"] = MODEL
    doc["spec"]["mcpExposure"]["enabled"] = False
    settings = yaml.safe_load((INSTALL / "settings.yaml").read_text())
    settings["images"]["engines"]["cpu"]["llamacpp"] = ENGINE
    settings["images"]["pullPolicy"] = "IfNotPresent"
    (root / "model.yaml").write_text(yaml.safe_dump(doc))
    (root / "settings.yaml").write_text(yaml.safe_dump(settings))
    out = subprocess.run([LLMOP, "render", "-f", str(root / "model.yaml"), "--settings",
                          str(root / "settings.yaml"), "-o", "json"], check=True,
                         capture_output=True, text=True).stdout
    objects: list[dict[str, Any]] = json.loads(out)["items"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            obj["spec"]["replicas"] = 0
    return [o for o in objects if o["kind"] in {"Deployment", "Service", "DaemonSet"}]


def forget_images(cluster: NodeCluster) -> None:
    """Neither image on the node: removed by every name, their content collected."""
    for ref in (ENGINE, MODEL, images.LLAMA_TAG):
        cluster.node._ctr("images", "rm", "--sync", ref, check=False)


def first_token(cluster: NodeCluster, timeout: float = 300) -> None:
    url = cluster.service_url(MODELS_NS, NAME, 8000)
    client = openai.OpenAI(base_url=url, api_key="unused", timeout=5, max_retries=0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            client.completions.create(model="gemma-3-270m", prompt=QUESTION, max_tokens=1)
            return
        except openai.APIError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)  # the Service refuses until the pod is Ready: poll


def scenario(cluster: NodeCluster, objects: list[dict[str, Any]], prefetched: bool
             ) -> tuple[float, float | None]:
    """(scale request -> first token, prefetch pull time or None), seconds."""
    forget_images(cluster)
    serving = [o for o in objects if o["kind"] != "DaemonSet"]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": serving}))
    pulled = None
    if prefetched:
        started = time.monotonic()
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(
            next(o for o in objects if o["kind"] == "DaemonSet")))
        cluster.kubectl("-n", MODELS_NS, "rollout", "status", f"daemonset/{NAME}-prefetch",
                        "--timeout=300s")
        pulled = time.monotonic() - started
    started = time.monotonic()
    cluster.kubectl("-n", MODELS_NS, "scale", f"deployment/{NAME}", "--replicas=1")
    first_token(cluster)
    took = time.monotonic() - started
    cluster.kubectl("-n", MODELS_NS, "delete", "deployment,service,daemonset", "-l",
                    f"app.kubernetes.io/instance={NAME}", "--wait=true", "--timeout=120s")
    cluster.kubectl("-n", MODELS_NS, "delete", "pods", "-l",
                    f"app.kubernetes.io/instance={NAME}", "--grace-period=0", "--force",
                    "--wait=true", "--timeout=120s")
    return took, pulled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=1, help="runs of each scenario")
    args = parser.parse_args()
    need_tools()
    results: dict[str, list[float]] = {"on demand": [], "prefetched": []}
    pulls: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, installed(Path(tmp) / "cluster") as cluster, \
            registry(Path(tmp) / "registry"):
        engine = images.llama_image()
        subprocess.run([LLMOP, "model-image", str(GEMMA_FILE), "-t", MODEL, "-o",
                        str(Path(tmp) / "model.tar")], check=True, capture_output=True)
        push(engine, ENGINE)
        push(Path(tmp) / "model.tar", MODEL)
        objects = rendered(Path(tmp))
        for _ in range(args.runs):
            for label, prefetched in (("on demand", False), ("prefetched", True)):
                took, pulled = scenario(cluster, objects, prefetched)
                results[label].append(took)
                if pulled is not None:
                    pulls.append(pulled)
    base = statistics.median(results["on demand"])
    print(f"\nscale 0 -> 1 to first token, Gemma 3 270M from images on {REGISTRY} "
          f"({args.runs} run(s) each; median seconds)")
    print(f"{'scenario':<12} {'first token':>12} {'vs on demand':>13}  runs")
    for label, values in results.items():
        median = statistics.median(values)
        print(f"{label:<12} {median:>12.2f} {median / base:>12.2f}x  "
              f"{' '.join(f'{v:.2f}' for v in values)}")
    if pulls:
        print(f"(the prefetch DaemonSet pulled both images in {statistics.median(pulls):.2f} s, "
              "before the scale request)")


if __name__ == "__main__":
    main()
