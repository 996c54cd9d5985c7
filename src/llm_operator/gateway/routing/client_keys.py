"""Client keys at the gateway: who is calling, which models they may use, limits and spend."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from aiohttp import web

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.keyring import ClientKey, Keyring, period_of, presented_key
from llm_operator.access.limits import Limits, retry_after_header
from llm_operator.access.limits import limits as build_limits
from llm_operator.access.spend import Ledger, over_budget
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.inbound.incoming import Incoming
from llm_operator.gateway.telemetry.metrics import Children, GatewayMetrics

log = logging.getLogger("llm_operator.gateway")

KEY_HELP = "send your key as Authorization: Bearer <key> (or x-api-key: <key>)"


@dataclass
class Client:
    """A key in use: its entry, live limits and metric series (bound once, like a route's)."""

    key: ClientKey
    limits: Limits
    metrics: GatewayMetrics

    def __post_init__(self) -> None:
        key_id, metrics = self.key.id, self.metrics
        self.prompt_tokens = metrics.key_tokens.labels(key_id, "prompt")
        self.completion_tokens = metrics.key_tokens.labels(key_id, "completion")
        self.cost = metrics.key_cost.labels(key_id)
        self.spend = metrics.key_spend.labels(key_id)
        self._by_status = Children(metrics.key_requests, key_id)

    def request(self, status: int) -> None:
        self._by_status(status).inc()

    def refused(self, reason: str) -> None:
        self.metrics.key_refused.labels(self.key.id, reason).inc()


class ClientGate:
    """Admits requests by client key; each key's limits and spend are held here."""

    def __init__(self, source: KeyringSource, ledger: Ledger, metrics: GatewayMetrics,
                 clock: Callable[[], float],
                 now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC), *,
                 local_share: float = 1.0) -> None:
        self.source, self.ledger, self.metrics = source, ledger, metrics
        self.local_share = local_share  # of each key's limit, while limits are not shared
        self._clock, self.now = clock, now
        self._keyring: Keyring | None = None
        self._clients: dict[str, Client] = {}

    def _current(self) -> dict[str, Client]:
        keyring = self.source.current()
        if keyring is not self._keyring:  # keep live buckets of keys whose limits are the same
            old, self._clients = self._clients, {}
            for key in keyring.keys:
                prior = old.get(key.id)
                same = prior is not None and \
                    (prior.key.requests_per_minute, prior.key.tokens_per_minute) == \
                    (key.requests_per_minute, key.tokens_per_minute)
                limits = prior.limits if prior is not None and same else build_limits(
                    f"key {key.id!r}", f"key:{key.id}", rpm=key.requests_per_minute,
                    tpm=key.tokens_per_minute, clock=self._clock, share=self.local_share)
                self._clients[key.id] = Client(key, limits, self.metrics)
            self._keyring = keyring
        return self._clients

    def member(self, key_id: str) -> Client | None:
        """The client of an enabled key by its id (the batch runner acts as the key)."""
        client = self._current().get(key_id)
        return None if client is None or client.key.disabled else client

    def identify(self, request: Incoming) -> Client | web.Response:
        """The calling client, or the 401 to answer."""
        clients = self._current()
        assert self._keyring is not None
        given = presented_key(request.headers)
        if given is None:
            self.metrics.auth_failures.labels("missing").inc()
            return error_response(
                401, f"this gateway needs an API key: {KEY_HELP}", "invalid_request_error",
                "missing_api_key", headers={"WWW-Authenticate": "Bearer"})
        key = self._keyring.find(given)
        if key is None:
            self.metrics.auth_failures.labels("invalid").inc()
            return error_response(
                401, "the API key is not valid (unknown, revoked or disabled); ask the "
                "gateway's operator for a key", "invalid_request_error", "invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"})
        return clients[key.id]

    @staticmethod
    def forbidden(client: Client, model: str) -> web.Response:
        client.refused("model")
        return error_response(403, f"key {client.key.id!r} may not use model {model!r}; "
                              "ask the gateway's operator to allow it", "permission_error",
                              "model_not_allowed", param="model")

    async def check_budget(self, client: Client) -> web.Response | None:
        """The 429 (insufficient_quota) when the key's budget for this period is spent."""
        over = await over_budget(client.key, self.ledger, self.now())
        if over is None:
            return None
        client.refused("budget")
        retry = {} if over.renews is None else {"Retry-After": retry_after_header(
            (over.renews - self.now()).total_seconds())}
        return error_response(429, over.message, "insufficient_quota", "budget_exceeded",
                              headers=retry)

    async def charge(self, client: Client, usd: float, prompt: int, completion: int) -> None:
        """Count a finished request's tokens and cost against the key."""
        key = client.key
        client.prompt_tokens.inc(prompt)
        client.completion_tokens.inc(completion)
        if usd <= 0:
            return
        client.cost.inc(usd)
        if key.budget is not None:
            period, _ = period_of(key.budget.period, self.now())
            total = await self.ledger.add(key.id, period, usd)
            client.spend.set(total)
