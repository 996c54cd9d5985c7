"""Fixtures: an emulated cluster with every kind the operator reads or writes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import kmock
import pytest

from cluster import Cluster


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    async with Cluster() as c, kmock.Server(c):
        c.register_operator_kinds()
        yield c
