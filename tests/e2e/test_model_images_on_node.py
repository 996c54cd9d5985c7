"""On the real node: the Gemma GGUF packed as a model image, served from an image volume and
from a modelcar sidecar.

`llmop model-image` packs the file (no Docker), the node's containerd 2.3.4 imports it as it
would pull it. The operator, seeing node-1's runtime and kubelet, mounts it as an image volume
(modelImages.mount: auto); the modelcar shape is rendered by `llmop render` with the setting
modelcar, on an image built on Debian's base layer (it needs sh, ln and sleep), and applied
with kubectl.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import images
import openai
import pytest
import yaml
from e2e_cluster import GEMMA_FILE, INSTALL, MODELS_NS, NodeCluster

from prompts import assert_chat_reaches_the_model

from samples import REPO, load_yaml

pytestmark = pytest.mark.e2e
NS = MODELS_NS
EXAMPLE = REPO / "examples" / "cluster" / "gemma-270m-image.yaml"
NAME = "gemma-270m-image"
PLAIN = "llmop.local/models/gemma-3-270m:q4_k_m"  # the example's ociImage
CAR = "llmop.local/models/gemma-3-270m:q4_k_m-modelcar"
QUESTION = "Q: What is the capital of France?\nA:"
LLMOP = str(Path(sys.executable).with_name("llmop"))


def _llmop(*args: str, stdin: str | None = None) -> str:
    return subprocess.run([LLMOP, *args], check=True, capture_output=True, text=True,
                          input=stdin, timeout=300).stdout


@pytest.fixture(scope="module")
def imaged(kube_node: NodeCluster, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[NodeCluster]:
    """Both model images built with `llmop model-image` and on the node."""
    out = tmp_path_factory.mktemp("model-images")
    base = images.debian_base_image()
    _llmop("model-image", str(GEMMA_FILE), "-t", PLAIN, "-o", str(out / "plain.tar"))
    _llmop("model-image", str(GEMMA_FILE), "-t", CAR, "-o", str(out / "car.tar"),
           "--base", str(base))
    for archive in ("plain.tar", "car.tar"):
        kube_node.node.import_image(out / archive)
    kube_node.namespace(NS)
    with kube_node.own_models():
        yield kube_node


def _ask(node: NodeCluster, name: str) -> str:
    client = openai.OpenAI(base_url=node.service_url(NS, name, 8000), api_key="unused",
                           timeout=60)
    answer = client.completions.create(model="gemma-3-270m", prompt=QUESTION, max_tokens=16,
                                       stop=["\n"], temperature=0)
    return answer.choices[0].text


def _pod(node: NodeCluster, name: str) -> dict[str, Any]:
    (pod,) = node.json("-n", NS, "get", "pods", "-l", f"app={name}")["items"]
    return pod  # type: ignore[no-any-return]


def test_the_operator_mounts_the_model_image_as_a_volume_on_a_node_that_can(
        imaged: NodeCluster) -> None:
    imaged.kubectl("apply", "-f", str(EXAMPLE))
    imaged.wait_phase(NS, NAME, "Ready", 180)
    pod = _pod(imaged, NAME)
    assert {"name": "model-image", "image": {"reference": PLAIN, "pullPolicy": "Never"}} \
        in pod["spec"]["volumes"]  # imported, as the test node's install says of all images
    assert [c["name"] for c in pod["spec"]["initContainers"]] == ["model-verify",
                                                                 "model-prepare"]
    assert "Paris" in _ask(imaged, NAME)
    engine = imaged.service_url(NS, NAME, 8000, "")  # and its chat, in Gemma's turns
    assert_chat_reaches_the_model(engine, f"{engine}/v1", "gemma-3-270m")
    model = imaged.json("-n", NS, "get", "llmmodel", NAME)
    assert model["status"]["model"]["chatTemplate"] is False  # hence chat-template: gemma
    assert model["status"]["model"]["sha256"] == \
        load_yaml(EXAMPLE)["spec"]["modelSource"]["sha256"]  # model-verify read the image
    # the volume is the image's /models, read-only
    listing = imaged.kubectl("-n", NS, "exec", pod["metadata"]["name"], "-c",
                             "inference-server", "--", "ls", "/model-cache/source")
    assert listing.split() == [GEMMA_FILE.name]
    said = imaged.kubectl("-n", NS, "exec", pod["metadata"]["name"], "-c", "inference-server",
                          "--", "sh", "-c", "touch /model-cache/source/x 2>&1 || true")
    assert "Read-only file system" in said
    # prefetchImages: a DaemonSet holds both images on the node, and status says where
    imaged.kubectl("-n", NS, "rollout", "status", f"daemonset/{NAME}-prefetch",
                   "--timeout=60s")
    imaged.plane.kubectl("-n", NS, "wait", f"llmmodel/{NAME}", "--timeout=30s",
                         "--for=jsonpath={.status.prefetchedNodes[0]}=node-1")
    (held,) = imaged.json("-n", NS, "get", "pods", "-l",
                          f"ai.example.io/prefetch-for={NAME}")["items"]
    assert [c["image"] for c in held["spec"]["initContainers"]] == [
        pod["spec"]["containers"][0]["image"]]
    assert {"name": "model-image", "image": {"reference": PLAIN, "pullPolicy": "Never"}} \
        in held["spec"]["volumes"]
    # it is not a replica: the Service's endpoints are the inference pod's alone
    slices = imaged.json("-n", NS, "get", "endpointslices", "-l",
                         f"kubernetes.io/service-name={NAME}")["items"]
    addresses = [a for s in slices for e in s.get("endpoints") or [] for a in e["addresses"]]
    assert addresses == [pod["status"]["podIP"]]
    imaged.clear_models(NAME)


def test_a_modelcar_shares_the_model_image_with_the_engine(imaged: NodeCluster,
                                                           tmp_path: Path) -> None:
    doc = load_yaml(EXAMPLE)
    doc["metadata"]["name"] = name = "gemma-270m-modelcar"
    doc["spec"]["modelSource"]["ociImage"] = CAR
    (tmp_path / "model.yaml").write_text(yaml.safe_dump(doc))
    settings = load_yaml(INSTALL / "settings.yaml")  # the installed operator's, but the mount
    (tmp_path / "settings.yaml").write_text(yaml.safe_dump({
        **settings, "modelImages": {"mount": "modelcar"}}))
    rendered = _llmop("render", "-f", str(tmp_path / "model.yaml"), "--settings",
                      str(tmp_path / "settings.yaml"), "-o", "json")
    objects = [o for o in json.loads(rendered)["items"]
               if o["kind"] in {"Deployment", "Service"}]
    try:
        imaged.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1",
                                                             "kind": "List",
                                                             "items": objects}))
        rolled = imaged.plane.kubectl("-n", NS, "rollout", "status", f"deployment/{name}",
                                      "--timeout=120s", check=False, timeout=150)
        assert rolled.returncode == 0, imaged.kubectl(
            "-n", NS, "describe", "pods", "-l", f"app={name}") + imaged.kubectl(
            "-n", NS, "logs", "-l", f"app={name}", "--all-containers", "--tail=20",
            check=False)
        pod = _pod(imaged, name)
        assert pod["spec"]["shareProcessNamespace"] is True
        car = pod["status"]["initContainerStatuses"][0]
        assert (car["name"], car["started"], car["ready"]) == ("model-image", True, True)
        assert "Paris" in _ask(imaged, name)
        link = imaged.kubectl("-n", NS, "exec", pod["metadata"]["name"], "-c",
                              "inference-server", "--", "readlink", "/model-cache/source")
        assert link.strip().startswith("/proc/") and link.strip().endswith("/root/models")
    finally:
        imaged.kubectl("-n", NS, "delete", "deployment,service", name, "--ignore-not-found",
                       "--wait=true", "--timeout=60s")
