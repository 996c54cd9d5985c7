"""docs/reference/llmmodel.md: every LLMModel field, from the CRD the API types generate.

    .venv/bin/python tools/api_reference.py [--check]

Walks the schema `llmop crd` prints (llm_operator/api/crd.py, built from the pydantic
types): each field's path, type, default, whether it is required, its bounds and allowed
values and what it does, then every admission rule (CEL) with the message it answers. With
``--check`` it exits 1 when the page is not what the code says
(tests/harness/test_reference_pages.py runs it in `make test`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generated_page import REPO, cell, limits, main

PAGE = REPO / "docs" / "reference" / "llmmodel.md"


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map of {_type(schema['additionalProperties'])}"
    if schema.get("x-kubernetes-int-or-string"):
        return "quantity (integer or string)"
    if schema.get("x-kubernetes-preserve-unknown-fields") and not kind:
        return "any"
    return str(kind or "any")


def fields(schema: dict[str, Any], path: str
           ) -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) of every field under ``schema``, depth first, in order."""
    required = set(schema.get("required", ()))
    for name, sub in schema.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        yield where, sub, name in required
        target = sub.get("items", sub) if sub.get("type") == "array" else sub
        if isinstance(target, dict) and "properties" in target:
            yield from fields(target, where + ("[]" if sub.get("type") == "array" else ""))


def rules(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, rule) of every CEL rule in ``schema``, its fields' and its items'."""
    for rule in schema.get("x-kubernetes-validations", ()):
        yield path or "spec", rule
    for name, sub in schema.get("properties", {}).items():
        yield from rules(sub, f"{path}.{name}" if path else name)
    items = schema.get("items")
    if isinstance(items, dict):
        yield from rules(items, path + "[]")


def page() -> str:
    sys.path.insert(0, str(REPO / "src"))
    from llm_operator.api.crd import crd  # noqa: PLC0415

    version = crd()["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]["properties"]
    spec = root["spec"]
    lines = ["# LLMModel reference", "",
             f"`ai.example.io/{version['name']}`, kind `LLMModel`: every field of `spec`, then "
             "the rules the API server checks at admission. Written from the CRD the API "
             "types generate (`llmop crd`) by `tools/api_reference.py`; `make test` fails when "
             "this page is stale. How to use them: [api.md](../api.md).", "",
             "## Fields of `spec`", "",
             "| field | type | default | required | values | what it does |",
             "|---|---|---|---|---|---|"]
    for where, schema, required in fields(spec, ""):
        default = f"`{json.dumps(schema['default'])}`" if "default" in schema else ""
        lines.append(f"| `{where}` | {_type(schema)} | {cell(default)} | "
                     f"{'yes' if required else ''} | {cell(limits(schema))} | "
                     f"{cell(schema.get('description', ''))} |")
    lines += ["", "## Rules checked at admission", "",
              "Each is a CEL rule on the object named; the API server refuses a document that "
              "breaks it with the message shown (`llmop validate` gives the same).", "",
              "| on | rule | message |", "|---|---|---|"]
    for where, rule in rules(spec, ""):
        lines.append(f"| `{where}` | `{cell(rule['rule'])}` | "
                     f"{cell(rule.get('message', ''))} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(PAGE, page, Path(__file__).name, __doc__.split("\n\n")[0]))
