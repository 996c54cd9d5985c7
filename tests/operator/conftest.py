"""The operator tests' fixtures on the session's real API server: a namespace, an admin client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from llm_operator.kube import Kube

from apitools import admin, fresh_namespace
from controlplane import ControlPlane


@pytest.fixture
def namespace(apiserver: ControlPlane) -> str:
    return fresh_namespace(apiserver, "t")


@pytest.fixture
async def kube(apiserver: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube(admin(apiserver)) as client:
        yield client
