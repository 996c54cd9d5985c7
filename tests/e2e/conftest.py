"""The end-to-end suite's session fixture: a real node with the operator installed.

One node cluster for the session (tests/realnode.py): the images built by tools/images.py
(cached by content hash) imported into its containerd, the operator installed with
`kubectl apply -k tests/e2e/install` (config/default with the local image tags), and the
Gemma 3 270M GGUF file from PyPI placed where examples/cluster/gemma-270m.yaml expects it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from e2e_cluster import (
    GEMMA,
    GEMMA_NAME,
    INSTALL,
    MODELS_NS,
    OPERATOR_NS,
    NodeCluster,
    prepare_node,
)

from realnode import node_cluster, node_missing, sweep_stale_node

from controlplane import missing
from k8s_schemas import large_schemas_dir
from samples import REPO

sys.path.insert(0, str(REPO / "tools"))  # prepare_node builds the images from there

E2E = REPO / "tests" / "e2e"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules marked `late` run after the others, each kept whole: on a new machine
    what they wait for (vLLM's image, the BF16 model and its LoRAs: `make`'s prebuild, ~18
    minutes into a run) is still being built while the others run."""
    items.sort(key=lambda item: item.get_closest_marker("late") is not None)


@pytest.fixture(scope="session")
def kube_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """A control plane and a real node with the operator installed and Available."""
    sweep_stale_node()  # what a killed run left behind would block this one
    reason = missing() or node_missing()
    if reason:
        pytest.fail(f"the test node cannot start: {reason}")
    now, later = prepare_node()
    with node_cluster(tmp_path_factory.mktemp("cluster"), now, later=later,
                      controllers=False) as (plane, node):
        # a cluster with LeaderWorkerSet's CRD (its controller's part is the test's:
        # tests/e2e/lws_standin.py), before the operator starts watching for it
        plane.kubectl("apply", "--server-side", "-f",
                      str(large_schemas_dir() / "leaderworkerset.x-k8s.io_leaderworkersets.yaml"))
        plane.kubectl("apply", "-k", str(INSTALL))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        plane.start_controller_manager()  # its garbage collector knows LLMModel from the start
        plane.kubectl("-n", OPERATOR_NS, "rollout", "status", "deployment/llm-operator",
                      "--timeout=120s")
        yield NodeCluster(plane, node)


@pytest.fixture(scope="module")
def gemma(kube_node: NodeCluster) -> NodeCluster:
    """The Gemma example, applied with kubectl as its header says, and Ready."""
    kube_node.namespace(MODELS_NS)
    kube_node.kubectl("apply", "-f", str(GEMMA))
    kube_node.wait_phase(MODELS_NS, GEMMA_NAME, "Ready", 180)
    return kube_node


@pytest.fixture(scope="module")
def routed(gemma: NodeCluster) -> NodeCluster:
    """The router and the MCP server installed beside the model."""
    gemma.apply_kustomization(E2E / "router", ["llmop-router"], OPERATOR_NS)
    gemma.apply_kustomization(E2E / "mcp", ["mcp-server"], MODELS_NS)
    return gemma
