"""The gateway's top level: the composition, the errors, and subpackages (the map is checked
with the other generated pages, tests/harness/test_reference_pages.py)."""

from __future__ import annotations

from samples import REPO


def test_the_gateway_top_level_holds_only_the_composition_the_errors_and_subpackages(
        ) -> None:
    top = REPO / "src" / "llm_operator" / "gateway"
    modules = sorted(p.name for p in top.glob("*.py"))
    assert modules == ["__init__.py", "app.py", "errors.py"]
    packages = sorted(p.name for p in top.iterdir() if (p / "__init__.py").exists())
    assert packages == ["flow", "inbound", "path", "providers", "routing", "server",
                        "settings", "telemetry", "upstream"]
