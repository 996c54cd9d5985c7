"""Server-sent events and usage in OpenAI-shaped answers: splitting, decoding, counting."""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple


class Usage(NamedTuple):
    """Tokens an answer reports: its prompt's and its completion's.

    ``cached``: of the prompt's, those the engine served from its prefix cache, where it
    says (``prompt_tokens_details.cached_tokens``).
    """

    prompt: int = 0
    completion: int = 0
    cached: int = 0


NO_USAGE = Usage()


def _usage_tokens(usage: Any) -> Usage:
    """Chat/Completions or Responses API usage (cached: ``*_tokens_details.cached_tokens``)."""
    if not isinstance(usage, dict):
        return NO_USAGE
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    return Usage(prompt if isinstance(prompt, int) else 0,
                 completion if isinstance(completion, int) else 0,
                 cached if isinstance(cached, int) and cached > 0 else 0)


_DECODER = json.JSONDecoder()


def usage_from_body(body: bytes) -> Usage:
    """Usage of a JSON response, decoding only the "usage" object (bodies can be large)."""
    at = body.rfind(b'"usage"')
    if at < 0:
        return NO_USAGE
    colon = body.find(b":", at + 7)
    try:
        text = body[colon + 1:].decode()
        usage, _ = _DECODER.raw_decode(text, len(text) - len(text.lstrip()))
    except (ValueError, UnicodeDecodeError):
        return NO_USAGE
    return _usage_tokens(usage)


EVENT_END = re.compile(rb"\r?\n\r?\n")


def split_events(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (each with its blank line) and the incomplete rest."""
    events, start = [], 0
    for end in EVENT_END.finditer(data):
        events.append(data[start:end.end()])
        start = end.end()
    return events, data[start:]


def usage_only(event: bytes) -> bool:
    """The event include_usage adds at the end: no choices, only usage."""
    if b'"usage"' not in event:
        return False  # most events: not decoded at all
    data = sse_data(event)
    return data is not None and not data.get("choices") and isinstance(data.get("usage"), dict)


def data_field(event: bytes) -> bytes | None:
    """An SSE event's data (its data lines joined), None when it has none (a comment)."""
    lines = [line[5:].removeprefix(b" ") for line in event.splitlines()
             if line.startswith(b"data:")]
    return b"\n".join(lines) if lines else None


def sse_data(event: bytes) -> dict[str, Any] | None:
    """The JSON object of an SSE event's data line (None for [DONE], comments, junk)."""
    for line in event.splitlines():
        if line.startswith(b"data:"):
            try:
                data = json.loads(line[5:])
            except ValueError:
                return None
            return data if isinstance(data, dict) else None
    return None


def usage_from_sse(tail: bytes) -> Usage:
    """Usage from the last SSE event that carries it (stream_options.include_usage)."""
    for raw in reversed(tail.split(b"\n")):
        line = raw.strip()
        if not line.startswith(b"data:") or b'"usage"' not in line:
            continue
        try:
            event = json.loads(line[5:])
        except ValueError:
            continue
        if isinstance(event, dict):
            usage = event.get("usage") or (event.get("response") or {}).get("usage")
            tokens = _usage_tokens(usage)
            if tokens.prompt or tokens.completion:
                return tokens
    return NO_USAGE
