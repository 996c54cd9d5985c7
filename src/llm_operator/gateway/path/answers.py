"""The gateway's own kinds of answer: a held stream, an answer that failed unseen, errors."""

from __future__ import annotations

import json

from aiohttp import web

from llm_operator.gateway.providers.messages_api import error_body

CLIENT_CLOSED = 499  # nginx's status for a client that closed the request (metrics only)
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
                    403: "permission_error", 404: "not_found_error",
                    413: "request_too_large", 429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}


class AnswerFailed(Exception):
    """The upstream failed after it began to answer, before the client received a byte.

    Nothing has reached the client, so the request may still go to another replica.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class HeldStream(web.StreamResponse):
    """A stream answered 200 with keepalives while its model had no replica.

    If no answer comes after all, the error goes into the stream as an OpenAI error
    event; ``outcome`` is then the status the metrics count.
    """

    outcome: int | None = None

    async def fail(self, response: web.Response) -> HeldStream:
        body = response.body if isinstance(response.body, bytes) else b"{}"
        await self.write(b"data: " + body + b"\n\ndata: [DONE]\n\n")
        await self.write_eof()
        self.outcome = response.status
        return self


def as_anthropic_error(response: web.Response) -> web.Response:
    """An error answer re-shaped as Anthropic's, status and headers kept."""
    message = f"HTTP {response.status}"
    try:
        decoded = json.loads(response.body) if isinstance(response.body, bytes) else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict):
        error = decoded.get("error")
        if isinstance(error, dict) and error.get("message"):
            message = str(error["message"])
        elif isinstance(error, str):
            message = error
    kind = ANTHROPIC_ERRORS.get(response.status, "api_error")
    headers = {k: v for k, v in response.headers.items()
               if k.lower() not in {"content-type", "content-length"}}
    return web.json_response(error_body(kind, message), status=response.status,
                             headers=headers)
