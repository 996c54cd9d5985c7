"""Resolve: the route serving the request's model for its client, and whether it can now."""

from __future__ import annotations

from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.client_keys import Client
from llm_operator.gateway.routing.routes import RouteState, RouteTable


class Resolve:
    """Sets ``state``, or answers 403, 404 or 503.

    403: the key may not use the model; 404: no such model here (and which there are);
    503: the route is marked unavailable (with why).
    """

    def __init__(self, table: RouteTable) -> None:
        self.table = table

    def __call__(self, ex: Exchange) -> web.StreamResponse | None:
        state = self.find(ex.model, ex.client)
        if not isinstance(state, RouteState):
            return state
        ex.route(state)
        if ex.trace is not None:
            ex.trace.note(**{"gen_ai.request.model": ex.model, "llmop.route": state.route.label})
        return self.table.unavailable_error(state, ex.model)

    def find(self, model: str, client: Client | None) -> RouteState | web.Response:
        """The route serving ``model`` for ``client``, or the 403 or 404 to answer."""
        table = self.table
        state = table.routes.get(model)
        if state is not None and client is not None and not client.key.may_use(model):
            assert table.gate is not None
            return table.gate.forbidden(client, model)
        if state is None:
            known = ", ".join(sorted(e["id"] for e in table.listed(client))) or "none"
            why = table.absent(model)
            message = f"The model {model!r} is not served: {why}" if why else \
                f"The model {model!r} does not exist here"
            return error_response(404, f"{message}; available models: {known}",
                                  "invalid_request_error", "model_not_found", param="model")
        return state
