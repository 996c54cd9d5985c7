"""Fixtures for the router on the real API server: replicas the endpoint controller sees."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from llm_operator.kube import Connection, Kube

from apitools import admin as admin_connection
from apitools import fresh_namespace
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
    return fresh_namespace(apiserver, "r")


@pytest.fixture
async def admin(apiserver: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube(admin_connection(apiserver)) as client:
        yield client
