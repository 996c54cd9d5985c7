"""Shared fixtures (golden files, a minimal model, a fake upstream, a cluster) and test order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import kmock
import pytest
from aiohttp.test_utils import TestServer

from cluster import Cluster
from controlplane import ControlPlane, control_plane, missing
from fake_upstream import FakeUpstream
from k8s_schemas import large_schemas_dir, schemas_dir
from llmop_process import Start, llmop_processes
from redisserver import redis_server
from samples import REPO


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="Rewrite golden files from the current output instead of comparing.")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The real-node suite (tests/e2e) last when one pytest runs everything: vLLM's image
    and model are built in the background (Makefile `prebuild`) meanwhile. `make test` runs
    the two side by side instead (tools/test_suites.py)."""
    items.sort(key=lambda item: "e2e" in item.path.relative_to(REPO).parts)


@pytest.fixture
def started() -> Iterator[Start]:
    """``start("gateway", "--config", path, serving=b"gateway listening")``: a real llmop."""
    with llmop_processes() as start:
        yield start


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


@pytest.fixture
def base_local() -> dict[str, Any]:
    """A minimal valid local model (vLLM on one H100) to mutate in table tests."""
    return {
        "apiVersion": "ai.example.io/v1alpha1",
        "kind": "LLMModel",
        "metadata": {"name": "base", "namespace": "ai-models"},
        "spec": {
            "modelId": "Qwen/Qwen3.5-9B",
            "deploymentMode": "local",
            "totalParametersBillions": 9,
            "contextWindowK": 32,
            "resources": {"vramPerAcceleratorGiB": 80},
        },
    }


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    server = TestServer(fake.app, host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    yield fake, f"http://127.0.0.1:{server.port}/v1"
    await server.close()


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    """An emulated cluster over HTTP with every kind the operator reads or writes."""
    async with Cluster() as c, kmock.Server(c):
        c.register_operator_kinds()
        yield c


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A real control plane for the session, installed as a user would.

    The third-party CRDs (KEDA, Prometheus-Operator, Gateway API, InferencePool, and with
    server-side apply LeaderWorkerSet and DisaggregatedSet), then
    `kubectl apply -k config/default`, then the controller manager (its garbage collector
    then knows every kind from the start) without the node lifecycle controller. Its files
    (logs, audit log) stay in pytest's temporary directory.
    """
    reason = missing()
    if reason:
        pytest.fail(f"the real control plane cannot start: {reason}")
    with control_plane(tmp_path_factory.mktemp("controlplane"), controllers=False) as plane:
        plane.kubectl("apply", "-f", str(schemas_dir()))
        plane.kubectl("apply", "--server-side", "-f", str(large_schemas_dir()))
        plane.kubectl("apply", "-k", str(REPO / "config" / "default"))
        plane.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
        # No kubelet runs here, so the node lifecycle controller would find every node
        # Unknown a minute in, and mark a pod NotReady that a test made Ready before the
        # controller saw the pod arrive (it did so in a CI run: test_router's first replica)
        plane.start_controller_manager("node-lifecycle-controller")
        plane.wait_allowed("system:serviceaccount:llm-operator-system:llm-operator",
                           "watch", "llmmodels.ai.example.io")
        for name, labels, resources in ACCELERATOR_NODES:  # room for every sample at once
            plane.add_node(name, labels, {**dict.fromkeys(resources, "64"), "cpu": "256",
                                          "memory": "2Ti"})
        plane.kubectl("apply", "-f", "-", stdin=json.dumps(NVIDIA_DRA_SLICE))
        yield plane


# One large node per accelerator vendor in the session's control plane, labelled as the
# vendors' device plugins and feature discovery label theirs: the GPU queue admits samples.
ACCELERATOR_NODES = (
    ("accel-nvidia", {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.memory": "196608",
                      "nvidia.com/gpu.product": "NVIDIA-B200"},
     ("nvidia.com/gpu", "nvidia.com/mig-3g.40gb")),  # whole GPUs, and MIG instances (mixed)
    ("accel-amd", {"amd.com/gpu.present": "true"}, ("amd.com/gpu",)),
    ("accel-gaudi", {"habana.ai/gaudi": "true"}, ("habana.ai/gaudi",)),
)
# NVIDIA's DRA driver publishing 16 H100s on accel-nvidia: the GPU queue admits DRA samples.
NVIDIA_DRA_SLICE = {
    "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
    "metadata": {"name": "accel-nvidia-gpu.nvidia.com"},
    "spec": {"driver": "gpu.nvidia.com", "nodeName": "accel-nvidia",
             "pool": {"name": "accel-nvidia", "generation": 1, "resourceSliceCount": 1},
             "devices": [{"name": f"gpu-{i}",
                          "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
                          "capacity": {"memory": {"value": "80Gi"}}} for i in range(16)]},
}


@pytest.fixture
async def redis_url(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """A fresh real redis-server for one test."""
    async with redis_server(tmp_path_factory.mktemp("redis")) as url:
        yield url
