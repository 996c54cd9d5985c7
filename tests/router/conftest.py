"""Fixtures for the router on the real API server: replicas the endpoint controller sees."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llm_operator.kube import Connection, Kube, from_kubeconfig

from controlplane import ControlPlane

REPO = Path(__file__).resolve().parents[2]
ROUTER_USER = "system:serviceaccount:llm-operator-system:llmop-router"


@pytest.fixture(scope="session")
def router_rbac(apiserver: ControlPlane) -> None:
    """config/router's RBAC, as `kubectl apply -k config/router` installs it."""
    apiserver.kubectl("apply", "-f", str(REPO / "config" / "router" / "rbac.yaml"))
    apiserver.wait_allowed(ROUTER_USER, "watch", "endpointslices.discovery.k8s.io")


@pytest.fixture
def router_connection(apiserver: ControlPlane, router_rbac: None) -> Connection:
    """The router's own identity: a token of its ServiceAccount."""
    return apiserver.identity("llmop-router", "llm-operator-system")


@pytest.fixture
def namespace(apiserver: ControlPlane) -> str:
    name = f"r-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name


@pytest.fixture
async def admin(apiserver: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube(from_kubeconfig(str(apiserver.kubeconfig))) as client:
        yield client
