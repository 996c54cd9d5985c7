"""What every page written from the code shares: write it, or check that it is current.

The tools that write docs/reference/*.md (and the gateway's map) call ``main``: with
``--check`` it exits 1 when the page differs from what the code says, which
tests/harness/test_reference_pages.py runs in `make test`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def main(page: Path, build: Callable[[], str], tool: str, description: str) -> int:
    """Write ``build()`` to ``page``, or with ``--check`` compare them; the exit status."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true",
                        help=f"exit 1 when {page.relative_to(REPO)} is not what the code says")
    args = parser.parse_args()
    wanted = build()
    if args.check:
        if not page.exists() or page.read_text(encoding="utf-8") != wanted:
            print(f"{page.relative_to(REPO)} is stale; run tools/{tool}", file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(wanted, encoding="utf-8")
    return 0


def limits(schema: dict[str, Any]) -> str:
    """A JSON schema's bounds, pattern and allowed values (its items' too), as short text."""
    said = []
    if "enum" in schema:
        said.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    items = schema.get("items", {})
    if isinstance(items, dict) and "enum" in items:
        said.append("each one of " + ", ".join(f"`{v}`" for v in items["enum"]))
    for key, word in (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
                      ("exclusiveMaximum", "<"), ("minLength", "length ≥"),
                      ("maxLength", "length ≤"), ("minItems", "items ≥"),
                      ("maxItems", "items ≤")):
        if key in schema:
            said.append(f"{word} {schema[key]}")
    if "pattern" in schema:
        said.append(f"pattern `{schema['pattern']}`")
    return "; ".join(said)


def cell(text: str) -> str:
    """``text`` fit for one cell of a Markdown table."""
    return text.replace("|", "\\|").replace("\n", " ")

