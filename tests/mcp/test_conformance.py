"""The official MCP conformance suite (npm) against our server: what applies passes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from npmtools import NODE, env, installed

from mcptools import Start

EXPECTED = Path(__file__).with_name("conformance-expected-failures.yaml")


@pytest.fixture(scope="session")
def conformance() -> list[str]:
    suite = installed("@modelcontextprotocol/conformance", "0.1.16")
    return [str(NODE), str(suite / "dist" / "index.js")]


async def test_every_scenario_that_applies_passes(start: Start, conformance: list[str],
                                                  tmp_path: Path) -> None:
    async with start() as running:
        url = running.mcp.replace("127.0.0.1", "localhost")  # as the suite's docs run it
        proc = await asyncio.create_subprocess_exec(
            *conformance, "server", "--url", url, "--expected-failures", str(EXPECTED),
            "-o", str(tmp_path), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=env())
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    report = out.decode(errors="replace")
    assert proc.returncode == 0, report[-4000:]
    summary = report[report.index("=== SUMMARY ==="):]
    for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams",
                     "dns-rebinding-protection"):
        assert f"✓ {scenario}:" in summary, summary
