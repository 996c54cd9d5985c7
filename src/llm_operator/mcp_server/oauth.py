"""OAuth 2.1 access tokens for /mcp: JWTs from one issuer, checked against its published keys."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import jwt

log = logging.getLogger(__name__)

# Asymmetric algorithms only: an HMAC "secret" would have to be shared with every client.
ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"]
REFRESH_SECONDS = 60.0  # an unknown key id refetches the key set at most this often
LEEWAY_SECONDS = 30

FetchJson = Callable[[str], Awaitable[Any]]


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer publishes its metadata: RFC 8414's path, then OpenID Connect's."""
    parts = urlsplit(issuer.rstrip("/"))
    origin = f"{parts.scheme}://{parts.netloc}"
    return [f"{origin}/.well-known/oauth-authorization-server{parts.path}",
            f"{issuer.rstrip('/')}/.well-known/openid-configuration"]


def resource_metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known path goes between the host and the resource's path."""
    parts = urlsplit(resource)
    path = "" if parts.path == "/" else parts.path
    return f"{parts.scheme}://{parts.netloc}/.well-known/oauth-protected-resource{path}"


@dataclass(frozen=True)
class TokenHolder:
    """The client a valid token was issued to, and its subject."""

    client_id: str
    subject: str | None
    scopes: tuple[str, ...]


class TokenVerifier:
    """Verifies signature, issuer, audience (this resource) and expiry of JWT access tokens."""

    def __init__(self, issuer: str, audience: str, fetch: FetchJson,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.issuer, self.audience = issuer, audience
        self._fetch, self._clock = fetch, clock
        self._keys: jwt.PyJWKSet | None = None
        self._fetched_at: float | None = None

    async def _key_set(self, *, refresh: bool = False) -> jwt.PyJWKSet:
        recent = self._fetched_at is not None and \
            self._clock() - self._fetched_at < REFRESH_SECONDS
        if self._keys is not None and (not refresh or recent):
            return self._keys
        jwks_uri = None
        for url in metadata_urls(self.issuer):
            try:
                meta = await self._fetch(url)
            except (OSError, ValueError) as exc:
                log.debug("issuer metadata %s: %s", url, exc)
                continue
            if isinstance(meta, dict) and isinstance(meta.get("jwks_uri"), str):
                jwks_uri = meta["jwks_uri"]
                break
        if jwks_uri is None:
            raise OSError(f"issuer {self.issuer} publishes no jwks_uri in its metadata")
        self._keys = jwt.PyJWKSet.from_dict(await self._fetch(jwks_uri))
        self._fetched_at = self._clock()
        return self._keys

    async def verify(self, token: str) -> TokenHolder | None:
        """The holder of a valid token; None when it is invalid for any reason (logged)."""
        try:
            header = jwt.get_unverified_header(token)
            kid = header.get("kid")
            keys = await self._key_set()
            key = _find(keys, kid)
            if key is None:  # the issuer may have rotated its keys
                key = _find(await self._key_set(refresh=True), kid)
            if key is None:
                log.info("OAuth token refused: no key %r at the issuer", kid)
                return None
            claims = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.audience,
                                issuer=self.issuer, leeway=LEEWAY_SECONDS,
                                options={"require": ["exp", "iss", "aud"]})
        except jwt.PyJWTError as exc:
            log.info("OAuth token refused: %s", exc)
            return None
        except OSError as exc:
            log.error("OAuth issuer unreachable: %s", exc)
            return None
        client = claims.get("client_id") or claims.get("azp") or claims.get("sub")
        if not isinstance(client, str) or not client:
            log.info("OAuth token refused: it names no client_id, azp or sub")
            return None
        scope = claims.get("scope")
        return TokenHolder(client, claims.get("sub"),
                           tuple(scope.split()) if isinstance(scope, str) else ())


def _find(keys: jwt.PyJWKSet, kid: object) -> jwt.PyJWK | None:
    for key in keys.keys:
        if kid is None or key.key_id == kid:
            return key
    return None
