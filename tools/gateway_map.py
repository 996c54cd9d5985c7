"""The gateway's map in docs/gateway.md, written from its packages' and modules' docstrings.

    .venv/bin/python tools/gateway_map.py [--check]

Each subpackage of ``llm_operator.gateway`` opens with a docstring that says what it owns;
each module with a line that says its role. This prints them as a tree (one line each)
between the map's markers in docs/gateway.md, or with ``--check`` exits 1 when the page
differs from what the code says (tests/harness/test_reference_pages.py runs it in `make test`).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GATEWAY = REPO / "src" / "llm_operator" / "gateway"
PAGE = REPO / "docs" / "gateway.md"
BEGIN = "<!-- gateway map: tools/gateway_map.py writes what follows -->"
END = "<!-- end of the gateway map -->"


def first_line(path: Path) -> str:
    """The first line of a module's docstring; AssertionError where it has none."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    assert doc, f"{path.relative_to(REPO)} opens with no docstring"
    return doc.strip().splitlines()[0]


def tree(folder: Path = GATEWAY, depth: int = 0) -> list[str]:
    """One line per module and subpackage under ``folder``: its name and its role."""
    lines = []
    pad = "  " * depth
    modules = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    for module in modules:
        lines.append(f"{pad}{module.name:<{max(28 - len(pad), 1)}} {first_line(module)}")
    for package in sorted(p for p in folder.iterdir()
                          if p.is_dir() and (p / "__init__.py").exists()):
        lines.append(f"{pad}{package.name + '/':<{max(28 - len(pad), 1)}} "
                     f"{first_line(package / '__init__.py')}")
        lines += tree(package, depth + 1)
    return lines


def block() -> str:
    return "\n".join([BEGIN, "```text", "src/llm_operator/gateway/", *(
        f"  {line}" for line in tree()), "```", END])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when docs/gateway.md's map is not what the code says")
    args = parser.parse_args()
    page = PAGE.read_text(encoding="utf-8")
    if BEGIN not in page or END not in page:
        print(f"{PAGE.relative_to(REPO)}: no map markers ({BEGIN})", file=sys.stderr)
        return 1
    head, rest = page.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    wanted = head + block() + tail
    if args.check:
        if wanted != page:
            print(f"{PAGE.relative_to(REPO)}: the gateway map is stale; run "
                  "tools/gateway_map.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
