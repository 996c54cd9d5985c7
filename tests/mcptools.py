"""Run an McpService on a loopback port for a test, and the bits of setup tests share."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from llm_operator.mcp_server.app import McpService

from fake_upstream import FakeUpstream
from samples import GUIDE_SAMPLES, load_yaml


@contextlib.asynccontextmanager
async def serving(service: McpService) -> AsyncIterator[str]:
    """The service's base URL while it runs (connections queue until startup completes)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = service.uvicorn_server(log_level="warning")
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in service.readiness)), 10)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)
        sock.close()


def guide_models(directory: Path, endpoint: str) -> Path:
    """The guide's seven samples in ``directory``, plus a status file: all serving at endpoint."""
    statuses: dict[str, Any] = {}
    for path in GUIDE_SAMPLES:
        doc = copy.deepcopy(load_yaml(path))
        (directory / path.name).write_text(yaml.safe_dump(doc), encoding="utf-8")
        remote = doc["spec"]["deploymentMode"] == "remote"
        statuses[doc["metadata"]["name"]] = {"phase": "Proxying" if remote else "Ready",
                                            "endpoint": endpoint}
    status_file = directory.parent / f"{directory.name}-status.yaml"
    status_file.write_text(yaml.safe_dump(statuses), encoding="utf-8")
    return status_file


@dataclass
class Running:
    url: str  # http://127.0.0.1:PORT
    service: McpService
    models: Path  # the watched directory
    status_file: Path
    upstream: FakeUpstream

    @property
    def mcp(self) -> str:
        return f"{self.url}/mcp"


Start = Callable[..., contextlib.AbstractAsyncContextManager[Running]]


GUARDED_TOOL = "gemma4_31b_nvidia"  # the guide's Gemma sample: the tool guard tests guard


async def with_guardrails(running: Running, rails: dict[str, Any]) -> str:
    """The Gemma sample with ``rails`` as its guardrails, once the server has read them: the
    model id its calls name upstream."""
    path = running.models / "gemma4-31b-nvidia.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["spec"]["guardrails"] = rails
    path.write_text(yaml.safe_dump(doc))
    catalog = running.service.catalog
    await running.service.until(lambda: (r := catalog.get(GUARDED_TOOL)) is not None
                                and r.guardrails is not None)
    return str(doc["spec"]["modelId"])

