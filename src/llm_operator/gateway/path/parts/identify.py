"""Identify: who is asking, by client key, or the batch runner acting as a batch's owner."""

from __future__ import annotations

import secrets

from aiohttp import web

from llm_operator.batch.runner import OWNER_HEADER, RUN_HEADER
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.client_keys import Client
from llm_operator.gateway.routing.routes import RouteTable


class Identify:
    """Sets ``client`` (with client keys) and ``batch_run``; answers 401 otherwise.

    The batch runner's requests carry a per-process secret (``runner_token``) and the
    owner's key id: they act as that key, at batch prices. Nothing else can.
    """

    def __init__(self, table: RouteTable, runner_token: str | None) -> None:
        self.table, self.runner_token = table, runner_token

    def __call__(self, ex: Exchange) -> web.StreamResponse | None:
        client = None
        token = self.runner_token and ex.request.headers.get(RUN_HEADER)
        if token:
            client = self._batch_owner(ex, token)
        gate = self.table.gate
        if gate is not None:  # who is asking, before reading what they ask
            found = client or gate.identify(ex.request)
            if isinstance(found, web.Response):
                return found  # the 401
            ex.client = found
            if ex.trace is not None:
                ex.trace.note(**{"llmop.client_key": found.key.id})
        return None

    def _batch_owner(self, ex: Exchange, token: str) -> Client | None:
        """The owner of a batch the runner sends a request of (its secret checked)."""
        assert self.runner_token is not None
        if not secrets.compare_digest(token, self.runner_token):
            return None  # not the runner: the request identifies itself as any other
        ex.batch_run = True
        owner = ex.request.headers.get(OWNER_HEADER, "")
        gate = self.table.gate
        return gate.member(owner) if gate is not None else None
