"""Fixtures: a fake upstream and a gateway in front of it, both real servers on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from llm_operator.gateway.app import Gateway
from llm_operator.gateway.settings.config import parse_config

from fake_upstream import FakeUpstream
from flowtools import GatedEngine
from gwtools import FakeTime, GatewayFactory, GatewayServer


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "apiKey"
    path.write_text("sk-first-key\n")
    return path



@pytest.fixture
async def gateway(upstream: tuple[FakeUpstream, str], key_file: Path
                  ) -> AsyncIterator[GatewayFactory]:
    """Build a gateway in front of the fake upstream: ``await gateway(route_overrides)``."""
    _, base_url = upstream
    started: list[TestClient[Any, Any]] = []

    async def make(route: dict[str, Any] | None = None, config: dict[str, Any] | None = None,
                   time: FakeTime | None = None) -> tuple[TestClient[Any, Any], Gateway]:
        doc = {"routes": [{
            "models": ["gpt-5.5", "frontier"],
            "upstream": {"baseUrl": base_url, "model": "gpt-5.5-2026-04-23",
                         "apiKey": {"file": str(key_file)}},
            "pricing": {"inputPerMillion": 5, "outputPerMillion": 30},
            **(route or {}),
        }], **(config or {})}
        kwargs: dict[str, Any] = {}
        if time is not None:
            kwargs = {"clock": time.clock, "sleep": time.sleep, "jitter": lambda: 1.0}
        gw = Gateway(parse_config(doc), **kwargs)
        client: TestClient[Any, Any] = TestClient(GatewayServer(
            gw.app(), host="127.0.0.1"))  # as `llmop gateway`: its own server
        await client.start_server()
        started.append(client)
        return client, gw

    yield make
    for client in started:
        await client.close()


@pytest.fixture
async def engine() -> AsyncIterator[tuple[GatedEngine, str]]:
    fake = GatedEngine()
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    yield fake, f"http://127.0.0.1:{server.port}/v1"
    for gate in fake._gates.values():  # let held handlers end
        gate.set()
    await server.close()
