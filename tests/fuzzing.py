"""Hostile inputs drawn by hypothesis: JSON values, values a JSON Schema describes, mutants.

Shared by the fuzzing suites of the gateway (its OpenAPI description) and the MCP server
(its tools' input schemas). Drawn with a fixed seed (``derandomize``): the same cases on
every run, so a failure reproduces.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

CARD = "4111 1111 1111 1111"
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                    | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
TEXT = st.text(max_size=40) | st.sampled_from([f"card {CARD}", "mail jane@example.com", ""])


def from_schema(schema: dict[str, Any], models: list[str], depth: int = 0
                ) -> st.SearchStrategy[Any]:
    """Values an OpenAPI (JSON Schema) fragment describes; the model ids are the known ones
    and others."""
    if "oneOf" in schema:
        return st.one_of([from_schema(s, models, depth + 1) for s in schema["oneOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        fields = {k: from_schema(v, models, depth + 1) for k, v in props.items()
                  if k == "model" or depth < 4}
        if "model" in fields:
            fields["model"] = st.sampled_from(models) | st.text(max_size=12)
        return st.fixed_dictionaries(
            {k: v for k, v in fields.items() if k in required},
            optional={k: v for k, v in fields.items() if k not in required})
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), models, depth + 1),
                        min_size=schema.get("minItems", 0), max_size=3)
    if kind == "string":
        return TEXT
    if kind == "integer":
        return st.integers(min_value=-2, max_value=2**40)
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False, min_value=-5, max_value=5)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return JSON


def mutated(valid: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[Any]:
    """A valid body with one field dropped or replaced by any JSON value."""
    def mutate(body: dict[str, Any], data: st.DataObject) -> Any:
        if not body:
            return body
        key = data.draw(st.sampled_from(sorted(body)))
        if data.draw(st.booleans()):
            return {k: v for k, v in body.items() if k != key}
        return {**body, key: data.draw(JSON)}
    return st.builds(mutate, valid, st.data())


def drawn(strategy: st.SearchStrategy[Any], count: int) -> list[Any]:
    """``count`` values of ``strategy``, the same each run."""
    out: list[Any] = []

    @settings(max_examples=count, database=None, derandomize=True, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return out
