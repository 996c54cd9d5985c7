"""Classify: the request's flow-control band and fairness ID (gateway/flow/bands.py decides)."""

from __future__ import annotations

from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.flow.bands import BadFairnessId, classify
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.routes import RouteTable


class Classify:
    """Sets ``who`` while flow control is on; a 400 for a fairness ID it cannot take."""

    def __init__(self, table: RouteTable) -> None:
        self.table = table

    def __call__(self, ex: Exchange) -> web.StreamResponse | None:
        flow = self.table.config.flow_control
        if not flow.enabled:
            return None
        try:
            ex.who = classify(flow, ex.request.headers,
                              ex.client.key if ex.client else None, self.table.objectives)
        except BadFairnessId as exc:
            return error_response(400, str(exc), "invalid_request_error",
                                  "invalid_fairness_id")
        return None
