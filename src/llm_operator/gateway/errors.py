"""Errors in OpenAI's shape, so every OpenAI client shows the gateway's message."""

from __future__ import annotations

import logging

from aiohttp import web

from llm_operator.gateway.inbound.incoming import Incoming

log = logging.getLogger("llm_operator.gateway")


def error_response(status: int, message: str, kind: str, code: str | None = None, *,
                   headers: dict[str, str] | None = None, param: str | None = None
                   ) -> web.Response:
    """``{"error": {message, type, param, code}}``; ``param`` names the field at fault."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


def unexpected(request: Incoming, exc: Exception, *, streaming: bool = False
               ) -> web.Response:
    """What a handler raised, answered in OpenAI's shape.

    Re-raised once an answer is under way (``streaming``: the server cuts the connection,
    the client sees it), and for a redirect.
    """
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        return error_response(exc.status, exc.reason, "invalid_request_error")
    if streaming:
        raise exc
    log.error("internal error serving %s %s", request.method, request.path, exc_info=exc)
    return error_response(500, "the gateway failed on this request (see its log)",
                          "server_error", "internal_error")
