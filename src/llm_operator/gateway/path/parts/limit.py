"""Limit: the client key's budget, then the route's and the key's rate limits, together."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from aiohttp import web

from llm_operator.access.limits import Limits, admit, retry_after_header
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.routes import RouteTable

if TYPE_CHECKING:  # with redis: the gateway imports it only where Redis is configured
    from llm_operator.access.shared import SharedLimits


class Limit:
    """Reserves the request's tokens in ``reservation``; a 429 with Retry-After otherwise.

    The route's and the client key's allowances are taken together or not at all; with
    ``shared`` (Redis) every gateway replica counts against the same ones.
    """

    def __init__(self, table: RouteTable, shared: SharedLimits | None) -> None:
        self.table, self.shared = table, shared

    def __call__(self, ex: Exchange
                 ) -> web.StreamResponse | Coroutine[Any, Any, web.StreamResponse | None] | None:
        """The answer at once without client keys or Redis; else a coroutine."""
        if ex.client is not None or self.shared is not None:
            return self._checked(ex)
        return self._answer(ex, admit([ex.state.limits], ex.body, ex.reservation))

    async def _checked(self, ex: Exchange) -> web.StreamResponse | None:
        client, state = ex.client, ex.state
        if client is not None:
            assert self.table.gate is not None
            spent = await self.table.gate.check_budget(client)
            if spent is not None:
                return spent
        parties = [state.limits] if client is None else [state.limits, client.limits]
        return self._answer(ex, await self.shared.admit(parties, ex.body, ex.reservation)
                            if self.shared else admit(parties, ex.body, ex.reservation))

    def _answer(self, ex: Exchange, refused: tuple[Limits, float] | None
                ) -> web.StreamResponse | None:
        client, state = ex.client, ex.state
        if ex.trace is not None:
            ex.trace.note(**{"llmop.rate_limited": refused is not None})
        if refused is None:
            return None
        party, wait = refused
        state.metrics.rate_limited.inc()
        if client is not None and party is client.limits:
            client.refused("rate_limit")
        return error_response(
            429, f"rate limit of {party.name} reached; retry after "
            f"{retry_after_header(wait)}s", "rate_limit_error", "rate_limit_exceeded",
            headers={"Retry-After": retry_after_header(wait)})
