"""The endpoints' edges: the paths the gateway serves, and what it answers off them.

Unknown paths answer 404 and wrong methods 405 (with ``Allow``) in OpenAI's error shape,
and the small endpoints' own errors are answered the same way (``answering_errors``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from llm_operator.gateway.errors import error_response, unexpected

PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MESSAGES_PATH = "/v1/messages"  # Anthropic-shaped clients, translated for any model
# the model's guardrails, OpenAI's moderation shape (a remote model without any: its own)
MODERATIONS_PATH = "/v1/moderations"
ENDPOINTS = ", ".join(f"POST {p}" for p in (*PROXIED_PATHS, MESSAGES_PATH, MODERATIONS_PATH)
                      ) + ", GET /v1/models, GET /models, GET /openapi.json"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def answering_errors(handler: Handler) -> Handler:
    """``handler`` with what it raises answered in OpenAI's shape (the gateway's own bugs).

    Not an aiohttp middleware: one on the application cost every proxied request ~16,000
    instructions (2.5 % of its CPU) for what only errors need; the proxied paths' own
    handler (path/request_path.py) answers its errors the same way.
    """
    async def answer(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except Exception as exc:  # every error gets an answer
            return unexpected(request, exc)
    return answer


def _not_allowed(allowed: str) -> Handler:
    async def answer(request: web.Request) -> web.StreamResponse:
        return error_response(405, f"{request.method} is not allowed on {request.path}; use "
                              f"{allowed}", "invalid_request_error", "method_not_allowed",
                              headers={"Allow": allowed})
    return answer


async def _no_endpoint(request: web.Request) -> web.StreamResponse:
    return error_response(404, f"no endpoint {request.method} {request.path} here; the "
                          f"gateway serves {ENDPOINTS}", "invalid_request_error",
                          "unknown_endpoint")


def finish_routes(router: web.UrlDispatcher) -> None:
    """Unknown paths (404) and wrong methods (405, with Allow) answered in OpenAI's shape.

    Each path gets a route for any other method, and a last route takes every other path.
    """
    paths: dict[str, tuple[web.Resource, set[str]]] = {}  # a path's last resource, methods
    for resource in router.resources():
        if isinstance(resource, web.Resource):
            _, methods = paths.get(resource.canonical, (resource, set()))
            paths[resource.canonical] = (resource, methods | {r.method for r in resource})
    for last, methods in paths.values():  # resolved in order: after every other method
        if hdrs.METH_ANY not in methods:
            last.add_route(hdrs.METH_ANY, _not_allowed(", ".join(sorted(methods))))
    router.add_route(hdrs.METH_ANY, "/{path:.*}", _no_endpoint)
