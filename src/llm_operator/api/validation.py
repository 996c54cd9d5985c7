"""Turn raw documents into LLMModel objects, or into one clear problem per broken field."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from llm_operator.api.formats import (
    DNS1035_LABEL,
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    HTTP_URL,
    LABEL_VALUE,
    MCP_TOOL_NAME,
    NO_WHITESPACE,
    S3_BUCKET,
)
from llm_operator.api.guardrails import GUARD_NAME
from llm_operator.api.rules import broken_rules
from llm_operator.api.v1alpha1 import (
    API_VERSION,
    KIND,
    LLMModel,
)

PATTERN_HINTS = {
    DNS1035_LABEL: "a DNS-1035 label (lowercase letters, digits and '-', starting with a letter)",
    DNS1123_LABEL: "a DNS-1123 label (lowercase letters, digits and '-')",
    DNS1123_SUBDOMAIN: "a Kubernetes object name (lowercase letters, digits, '-' and '.')",
    MCP_TOOL_NAME: "an MCP tool name (1-128 characters of A-Z a-z 0-9 _ - .)",
    HTTP_URL: "an http:// or https:// URL",
    S3_BUCKET: "an S3 bucket name (3-63 lowercase letters, digits, '.' and '-')",
    NO_WHITESPACE: "a single word without spaces",
    GUARD_NAME: "a guard name (up to 63 lowercase letters, digits and '-', starting and "
    "ending with a letter or digit)",
    LABEL_VALUE: "a label value (up to 63 letters, digits, '-', '_' and '.', starting and "
    "ending with a letter or digit)",
}


@dataclass(frozen=True)
class Problem:
    """One thing wrong with one field of one document."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidModel(ValueError):
    """A document that is not a valid LLMModel; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _message(error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        return "unknown field (check its spelling and indentation against docs/api.md)"
    if kind == "missing":
        return "required field is missing"
    message = str(error["msg"])
    if kind == "string_pattern_mismatch":
        pattern = error.get("ctx", {}).get("pattern", "")
        hint = PATTERN_HINTS.get(pattern)
        need = f"be {hint}" if hint else f"match the pattern {pattern}"
        return f"must {need}, got {error['input']!r}"
    if kind in {"literal_error", "enum"}:
        return f"{message}, got {error['input']!r}"
    if kind.startswith(("greater_than", "less_than", "too_long", "too_short")):
        return f"{message}, got {error['input']!r}"
    return message.removeprefix("Value error, ")


def _identity_problems(doc: dict[str, Any]) -> list[Problem]:
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if api_version == API_VERSION and kind == KIND:
        return []
    return [Problem("", f"not an LLMModel: apiVersion {api_version!r}, kind {kind!r} "
                        f"(expected apiVersion {API_VERSION!r}, kind {KIND!r})")]


def parse_llmmodel(doc: Any) -> LLMModel:
    """Validate a decoded document as an LLMModel: structure, field formats, then the rules.

    Raises InvalidModel listing every problem (field path and what to change).
    """
    if not isinstance(doc, dict):
        raise InvalidModel([Problem("", f"expected a mapping, got {type(doc).__name__}")])
    identity = _identity_problems(doc)
    if identity:
        raise InvalidModel(identity)
    try:
        model = LLMModel.model_validate(doc)
    except ValidationError as exc:
        raise InvalidModel(
            [Problem(_path(err["loc"]), _message(err)) for err in exc.errors()]
        ) from None
    broken = broken_rules(model)
    if broken:
        raise InvalidModel([Problem(rule.path, rule.message) for rule in broken])
    return model


def object_label(doc: Any, index: int) -> str:
    """A human name for a document: ``namespace/name`` or its position in the file."""
    if isinstance(doc, dict):
        meta = doc.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            ns = meta.get("namespace")
            kind = doc.get("kind", "object")
            return f"{kind} {ns}/{meta['name']}" if ns else f"{kind} {meta['name']}"
    return f"document #{index + 1}"


def field_errors(exc: ValidationError, source: str) -> str:
    """One line per bad field of a config file: ``source: path.to.field: what is wrong``."""
    lines = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{source}: {path}: {msg}")
    return "\n".join(lines)
