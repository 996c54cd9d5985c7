"""Fixtures: an MCP server over the guide's samples (files registry), real HTTP on loopback."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from llm_operator.mcp_server.run import service
from llm_operator.mcp_server.settings import McpSettings

from fake_upstream import FakeUpstream
from mcptools import Running, Start, guide_models, serving


@pytest.fixture
def start(tmp_path: Path, upstream: tuple[FakeUpstream, str]) -> Start:
    """Start a server over the guide's samples; keyword arguments go to McpSettings."""
    fake, endpoint = upstream

    @contextlib.asynccontextmanager
    async def run(**settings: Any) -> AsyncIterator[Running]:
        models = tmp_path / "models"
        models.mkdir(exist_ok=True)
        status_file = guide_models(models, endpoint)
        async with service(McpSettings(**settings), files=models, status_file=status_file) \
                as svc, serving(svc) as url:
            yield Running(url, svc, models, status_file, fake)

    return run


@pytest.fixture
async def running(start: Start) -> AsyncIterator[Running]:
    async with start() as r:
        yield r
