"""The official MCP conformance suite (npm) against our server: what applies passes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from mcp.client import Client
from prometheus_client.parser import text_string_to_metric_families

from mcptools import Start
from npmtools import NODE, env, installed

EXPECTED = Path(__file__).with_name("conformance-expected-failures.yaml")
EXPECTED_2026 = Path(__file__).with_name("conformance-2026-07-28-expected-failures.yaml")
ALPHA = "0.2.0-alpha.12"  # the first suite with the 2026-07-28 requirement set


@pytest.fixture(scope="session")
def conformance() -> list[str]:
    suite = installed("@modelcontextprotocol/conformance", "0.1.16")
    return [str(NODE), str(suite / "dist" / "index.js")]


@pytest.fixture(scope="session")
def conformance_2026() -> list[str]:
    suite = installed("@modelcontextprotocol/conformance", ALPHA, alias="conformance-2026")
    return [str(NODE), str(suite / "dist" / "index.js")]


async def run_suite(command: list[str], *args: str) -> tuple[int | None, str]:
    proc = await asyncio.create_subprocess_exec(
        *command, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env=env())
    out, _ = await asyncio.wait_for(proc.communicate(), 300)
    return proc.returncode, out.decode(errors="replace")


async def test_every_scenario_that_applies_passes(start: Start, conformance: list[str],
                                                  tmp_path: Path) -> None:
    async with start() as running:
        url = running.mcp.replace("127.0.0.1", "localhost")  # as the suite's docs run it
        code, report = await run_suite(conformance, "server", "--url", url,
                                       "--expected-failures", str(EXPECTED),
                                       "-o", str(tmp_path))
    assert code == 0, report[-4000:]
    summary = report[report.index("=== SUMMARY ==="):]
    for scenario in ("server-initialize", "ping", "tools-list", "server-sse-multiple-streams",
                     "dns-rebinding-protection"):
        assert f"✓ {scenario}:" in summary, summary


async def test_the_suite_twice_then_an_sdk_client_from_the_same_address_all_get_in(
        start: Start, conformance: list[str], tmp_path: Path) -> None:
    """The suite opens a session per scenario and never DELETEs one: at the per-client cap
    its idle sessions end for new ones instead of locking it (and the next client) out."""
    async with start() as running:
        url = running.mcp.replace("127.0.0.1", "localhost")
        for run in ("first", "second"):
            code, report = await run_suite(conformance, "server", "--url", url,
                                           "--expected-failures", str(EXPECTED),
                                           "-o", str(tmp_path / run))
            assert code == 0, (run, report[-4000:])
        async with Client(running.mcp, mode="legacy") as client:
            assert (await client.list_tools()).tools
        async with aiohttp.ClientSession() as http, http.get(f"{running.url}/metrics") as resp:
            exposed = {s.name: s.value for family in text_string_to_metric_families(
                await resp.text()) for s in family.samples}
        assert exposed["llmop_mcp_sessions"] <= 32
        assert exposed["llmop_mcp_sessions_ended_for_cap_total"] > 0


REQUIREMENTS = {  # requirement set: (expected failures, scenarios that must pass)
    "2026-07-28": (EXPECTED_2026, (
        "tools-list", "server-sse-multiple-streams", "dns-rebinding-protection",
        "http-header-validation", "input-required-result-unsupported-methods",
        "input-required-result-validate-input")),
    "2025-11-25": (EXPECTED, (
        "server-initialize", "ping", "tools-list", "server-session-lifecycle",
        "server-sse-multiple-streams", "server-sse-polling", "dns-rebinding-protection")),
}


@pytest.mark.parametrize("revision", REQUIREMENTS)
async def test_each_spec_revisions_requirements_that_apply_pass(
        start: Start, conformance_2026: list[str], tmp_path: Path, revision: str) -> None:
    """The 0.2 alpha's requirement sets, frozen per spec revision; what cannot apply is listed."""
    expected, passing = REQUIREMENTS[revision]
    async with start() as running:
        url = running.mcp.replace("127.0.0.1", "localhost")
        code, report = await run_suite(conformance_2026, "server", "--url", url,
                                       "--requirements", revision, "--expected-failures",
                                       str(expected), "-o", str(tmp_path))
    assert code == 0, report[-4000:]
    summary = report[report.index("=== SUMMARY ==="):]
    for scenario in passing:
        assert f"✓ {scenario}:" in summary, summary
