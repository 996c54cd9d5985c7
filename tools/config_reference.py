"""docs/reference/gateway-config.md: every key of the gateway's config file, from its models.

    .venv/bin/python tools/config_reference.py [--check]

Walks the JSON schema of ``GatewayConfig`` (llm_operator/gateway/settings/config.py, the
pydantic models `llmop gateway --config` reads): each key's path, type, default, bounds and
what it does. ``--check`` exits 1 when the page is not what the code says
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

PAGE = REPO / "docs" / "reference" / "gateway-config.md"


def _resolve(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a ``$ref`` (or a nullable one: ``anyOf`` with null) followed."""
    if "$ref" in schema:
        return {**defs[schema["$ref"].rsplit("/", 1)[1]],
                **{k: v for k, v in schema.items() if k != "$ref"}}
    options = [o for o in schema.get("anyOf", ()) if o.get("type") != "null"]
    if len(options) == 1:
        return {**_resolve(options[0], defs),
                **{k: v for k, v in schema.items() if k != "anyOf"}}
    return schema


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    schema = _resolve(schema, defs)
    if "anyOf" in schema:
        return " or ".join(_type(o, defs) for o in schema["anyOf"] if o.get("type") != "null")
    kind = schema.get("type")
    if kind == "array":
        return f"list of {_type(schema.get('items', {}), defs)}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'], defs)}"
    return str(kind or "any")


def keys(schema: dict[str, Any], defs: dict[str, Any], path: str, seen: frozenset[str]
         ) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, schema) of every key under ``schema``, depth first.

    A model met again along its own path is not walked twice.
    """
    for name, sub in schema.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        yield where, sub
        target = _resolve(sub, defs)
        ref = sub.get("$ref") or next((o.get("$ref") for o in sub.get("anyOf", ())
                                       if "$ref" in o), None)
        if target.get("type") == "array":
            item = target.get("items", {})
            ref = item.get("$ref")
            target, where = _resolve(item, defs), where + "[]"
        if ref is not None and ref in seen:
            continue
        if "properties" in target:
            yield from keys(target, defs, where, seen | ({ref} if ref else set()))


def page() -> str:
    sys.path.insert(0, str(REPO / "src"))
    from llm_operator.gateway.settings.config import GatewayConfig  # noqa: PLC0415

    schema = GatewayConfig.model_json_schema(by_alias=True)
    defs = schema.get("$defs", {})
    lines = ["# The gateway's config file", "",
             "Every key of the YAML `llmop gateway --config FILE` reads (the router's "
             "`--settings` file takes its `flowControl`, `tracing` and `batch`): written "
             "from the config's models by `tools/config_reference.py` (`make test` fails "
             "when this page is stale). An unknown key is refused, naming it. How to use "
             "them: [gateway.md](../gateway.md).", "",
             "| key | type | default | values | what it does |", "|---|---|---|---|---|"]
    for where, sub in keys(schema, defs, "", frozenset()):
        resolved = _resolve(sub, defs)
        default = f"`{json.dumps(sub['default'])}`" if "default" in sub else ""
        lines.append(f"| `{where}` | {_type(sub, defs)} | {cell(default)} | "
                     f"{cell(limits(resolved))} | "
                     f"{cell(sub.get('description') or resolved.get('description', ''))} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(PAGE, page, Path(__file__).name, __doc__.split("\n\n")[0]))
