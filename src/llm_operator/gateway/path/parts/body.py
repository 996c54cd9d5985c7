"""ReadBody: the request's bytes, its JSON and the model it names (Anthropic's translated)."""

from __future__ import annotations

import json

import orjson
from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.providers.messages_api import MessagesError, to_openai
from llm_operator.gateway.routing.routes import RouteTable


class ReadBody:
    """Sets ``raw``, ``body`` and ``model``; a 400 or 413 that says what to fix."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table

    async def __call__(self, ex: Exchange) -> web.StreamResponse | None:
        request = ex.request
        limit = self.table.config.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._too_large()
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return self._too_large()
        try:  # orjson: a 1 MB body in 0.4 ms, not json's 1.8 ms, on the event loop
            body = orjson.loads(raw)
        except ValueError as exc:  # orjson.JSONDecodeError too (nesting past 1024 levels)
            return error_response(400, f"request body is not valid JSON: {exc}",
                                  "invalid_request_error", "invalid_json")
        if ex.anthropic and isinstance(body, dict):
            try:
                body = to_openai(body)
            except MessagesError as exc:
                return error_response(400, str(exc), "invalid_request_error")
            raw = json.dumps(body, separators=(",", ":")).encode()
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            return error_response(400, "the request needs a string field 'model'",
                                  "invalid_request_error", "missing_model", param="model")
        ex.raw, ex.body, ex.model = raw, body, model
        return None

    def _too_large(self) -> web.Response:
        return error_response(413, f"request body exceeds {self.table.config.max_request_bytes}"
                              " bytes", "invalid_request_error", "request_too_large")
