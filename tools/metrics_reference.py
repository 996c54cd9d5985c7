"""docs/reference/metrics.md: every metric the project exports, read from its registries.

    .venv/bin/python tools/metrics_reference.py [--check]

Each component keeps its metrics in a registry of its own (the gateway, which the router
and ``llmop up`` serve too; the MCP server; the operator). This builds each, reads every
family's name, type, labels and help text as Prometheus would list them, and writes the
page; ``--check`` exits 1 when the page is not what the code says
(tests/harness/test_reference_pages.py runs it in `make test`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_page import REPO, main

PAGE = REPO / "docs" / "reference" / "metrics.md"


def families(holder: Any) -> Iterator[tuple[str, str, tuple[str, ...], str]]:
    """(name as exported, type, label names, help) of each metric a metrics object holds."""
    for value in vars(holder).values():
        kind = getattr(value, "_type", None) or getattr(value, "kind", None)
        name = getattr(value, "_name", None) or getattr(value, "name", None)
        if not isinstance(kind, str) or not isinstance(name, str):
            continue
        labels = tuple(getattr(value, "_labelnames", None)
                       or getattr(value, "labelnames", ()) or ())
        documentation = getattr(value, "_documentation", None) \
            or getattr(value, "documentation", "")
        exported = f"{name}_total" if kind == "counter" and not name.endswith("_total") \
            else name
        yield exported, kind, labels, str(documentation)


def sections() -> list[tuple[str, str, list[tuple[str, str, tuple[str, ...], str]]]]:
    sys.path.insert(0, str(REPO / "src"))
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from llm_operator.gateway.telemetry.metrics import GatewayMetrics  # noqa: PLC0415
    from llm_operator.mcp_server.metrics import McpMetrics  # noqa: PLC0415
    from llm_operator.operator.metrics import OperatorMetrics  # noqa: PLC0415
    from llm_operator.router.app import pending_requests  # noqa: PLC0415

    gateway = sorted(families(GatewayMetrics()))
    return [
        ("The gateway", "`llmop gateway`, the router and `llmop up`'s gateway, on `/metrics`. "
         "The router adds its own series below.", gateway),
        ("The router", "Beside the gateway's, on the router's `/metrics`.",
         sorted(families(SimpleNamespace(pending=pending_requests(CollectorRegistry()))))),
        ("The MCP server", "`llmop mcp`, on `/metrics`.", sorted(families(McpMetrics()))),
        ("The operator", "`llmop operator`, on its metrics port.",
         sorted(families(OperatorMetrics()))),
    ]


def page() -> str:
    lines = ["# Metrics", "",
             "Every series the project exports, with its labels and what it counts: written "
             "from the code's registries by `tools/metrics_reference.py` (`make test` fails "
             "when this page is stale). A histogram exports `_bucket`, `_sum` and `_count`; "
             "labels never carry a key, a prompt or a secret. Which alerts and dashboards "
             "read them: [monitoring](../monitoring.md).", ""]
    for title, where, rows in sections():
        lines += [f"## {title}", "", where, "", "| metric | type | labels | what it counts |",
                  "|---|---|---|---|"]
        for name, kind, labels, documentation in rows:
            shown = ", ".join(f"`{label}`" for label in labels) or "-"
            lines.append(f"| `{name}` | {kind} | {shown} | {documentation.replace('|', '/')} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(PAGE, page, Path(__file__).name, __doc__.split("\n\n")[0]))
