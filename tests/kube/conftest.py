"""A Kubernetes emulator with real API semantics, served over HTTP on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from cluster import Cluster


@pytest.fixture
async def kube() -> AsyncIterator[Cluster]:
    async with Cluster() as cluster, kmock.Server(cluster):
        cluster.register("v1", "configmaps", "ConfigMap")
        cluster.register("apps/v1", "deployments", "Deployment", status=True)
        cluster.register("ai.example.io/v1alpha1", "llmmodels", "LLMModel", status=True)
        yield cluster
