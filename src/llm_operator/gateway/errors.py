"""Errors in OpenAI's shape, so every OpenAI client shows the gateway's message."""

from __future__ import annotations

from aiohttp import web


def error_response(status: int, message: str, kind: str, code: str | None = None, *,
                   headers: dict[str, str] | None = None, param: str | None = None
                   ) -> web.Response:
    """``{"error": {message, type, param, code}}``; ``param`` names the field at fault."""
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


class Refusal(Exception):
    """A request the gateway answers itself (4xx, 503) without calling an upstream."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response
