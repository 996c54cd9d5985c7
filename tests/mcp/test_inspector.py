"""The MCP Inspector's command line (npm), as a developer pokes at the server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from mcptools import Start
from npmtools import NODE, env, installed


@pytest.fixture(scope="session")
def inspector() -> list[str]:
    package = installed("@modelcontextprotocol/inspector", "2.12.0")
    manifest = json.loads((package / "package.json").read_text())
    return [str(NODE), str(package / manifest["bin"]["mcp-inspector"])]


async def inspect(inspector: list[str], url: str, *args: str) -> Any:
    proc = await asyncio.create_subprocess_exec(
        *inspector, "--cli", url, "--transport", "http", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env())
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    return json.loads(out)


async def test_the_inspector_lists_and_calls_the_tools(start: Start,
                                                       inspector: list[str]) -> None:
    async with start() as running:
        listed = await inspect(inspector, running.mcp, "--method", "tools/list")
        called = await inspect(inspector, running.mcp, "--method", "tools/call",
                               "--tool-name", "list_available_models",
                               "--tool-arg", "domain=reasoning")
    names = [t["name"] for t in listed["tools"]]
    assert names[0] == "list_available_models" and "qwen36_reasoning_gaudi" in names
    assert not called.get("isError")
    found = {m["toolName"] for m in called["structuredContent"]["models"]}
    assert "qwen36_reasoning_gaudi" in found
