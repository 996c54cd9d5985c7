"""What an agent is told when a model call fails, and the redacted detail the log keeps."""

from __future__ import annotations

import re
from typing import Any

DETAIL_LIMIT = 300  # characters of an upstream's error kept in the log

# Agents get the status and what it means, never the upstream's body: bodies carry stack
# traces, file paths, internal hosts and, from careless servers, credentials.
CATEGORIES: dict[int, str] = {
    400: "the model's server refused the request (too long for its context, or a "
         "parameter it does not take)",
    401: "the model's server refused the gateway's credentials",
    403: "the model's server refused the gateway's credentials",
    404: "the model's server does not know this model",
    408: "the model's server timed out",
    413: "the request is too large for the model's server",
    422: "the model's server refused the request (too long for its context, or a "
         "parameter it does not take)",
    429: "the model is rate limited; try again shortly",
    503: "the model is unavailable (loading, scaling up or overloaded); try again shortly",
    504: "the model's server timed out",
}

# Credentials as they show up in error text: OpenAI/Anthropic-style keys, bearer tokens,
# key=value pairs, and URLs with a user:password part.
SECRETS = (
    re.compile(r"(?i)\b((?:api[_-]?key|x-api-key|token|secret|password|authorization)"
               r"[\"']?\s*[:=]\s*[\"']?)(?:(?:bearer|basic)\s+)?[^\s\"',;&]+"),
    re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]+=*"),
    re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{6,}"),
    re.compile(r"\bAIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
)


def summary(who: str, status: int) -> str:
    """The agent's view of a failed call: the status and what it means."""
    meaning = CATEGORIES.get(status) or ("the model's server failed" if status >= 500
                                         else "the model's server refused the request")
    return f"{who} answered HTTP {status}: {meaning}"


def redact(text: str) -> str:
    """``text`` with anything that looks like a credential replaced by [REDACTED]."""
    for pattern in SECRETS:
        text = pattern.sub(lambda m: (m.group(1) if m.re.groups else "") + "[REDACTED]",
                           text)
    return text


def detail(payload: Any, raw: str = "") -> str:
    """The upstream's own error message (OpenAI shape, else its raw text), redacted and cut."""
    message: Any = None
    if isinstance(payload, dict):
        err = payload.get("error")
        message = err.get("message") if isinstance(err, dict) else err or payload.get("message")
    text = message if isinstance(message, str) and message else raw
    return redact(" ".join(text.split()))[:DETAIL_LIMIT]
