"""Who is calling /mcp: a client key from the keys file, or an OAuth token from the issuer."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.keyring import ClientKey
from llm_operator.access.limits import TokenBucket
from llm_operator.mcp_server.oauth import TokenVerifier

CALLER = "llmop.caller"  # the ASGI scope key handlers read the caller from


@dataclass(frozen=True)
class Caller:
    """An authenticated client; ``key`` holds its allowances (None: every tool)."""

    id: str
    key: ClientKey | None = None

    def may_call(self, tool: str, model: str | None) -> bool:
        return self.key is None or self.key.may_call(tool, model)


class Denied(Exception):
    """No valid credentials: the 401's error code and a description safe to show."""

    def __init__(self, error: str, description: str) -> None:
        super().__init__(description)
        self.error, self.description = error, description


@dataclass
class McpAuth:
    """Checks the bearer token of every /mcp request; rate-limits tool calls per key."""

    keys: KeyringSource | None = None
    oauth: TokenVerifier | None = None
    metadata_url: str | None = None  # RFC 9728 metadata, named in every 401
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[int, TokenBucket]] = field(default_factory=dict)

    async def caller(self, headers: Mapping[str, str]) -> Caller:
        given = headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Denied("invalid_request", "this MCP server needs a bearer token: send "
                         "Authorization: Bearer <token>")
        if self.keys is not None:
            key = self.keys.current().find(token)
            if key is not None:
                return Caller(key.id, key)
        if self.oauth is not None and token.count(".") == 2:
            holder = await self.oauth.verify(token)
            if holder is not None:
                return Caller(holder.client_id)
        raise Denied("invalid_token", "the bearer token is not valid (unknown, revoked, "
                     "expired or issued for another resource)")

    def challenge(self, denied: Denied) -> str:
        """The WWW-Authenticate value of a 401 (RFC 6750, with RFC 9728's resource_metadata)."""
        parts = [f'error="{denied.error}"', f'error_description="{denied.description}"']
        if self.metadata_url is not None:
            parts.append(f'resource_metadata="{self.metadata_url}"')
        return "Bearer " + ", ".join(parts)

    def call_wait(self, caller: Caller) -> float:
        """0 when the caller's tool-calls-per-minute allow one more now, else the wait."""
        rpm = caller.key.requests_per_minute if caller.key is not None else None
        if rpm is None:
            return 0.0
        held = self._buckets.get(caller.id)
        if held is None or held[0] != rpm:  # new key, or its limit changed
            held = self._buckets[caller.id] = (rpm, TokenBucket(rpm, self.clock))
        return held[1].take()
