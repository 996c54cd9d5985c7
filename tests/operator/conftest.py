"""The operator tests' fixtures on the session's real API server: a namespace, an admin client."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from llm_operator.kube import Kube

from apitools import admin
from controlplane import ControlPlane


@pytest.fixture
def namespace(apiserver: ControlPlane) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name


@pytest.fixture
async def kube(apiserver: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube(admin(apiserver)) as client:
        yield client
