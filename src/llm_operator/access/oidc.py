"""OpenID Connect sign-in for the console, the pure part: settings, rules, ID tokens, sessions.

The console (console/oidc_sign_in.py) runs the authorization code flow against an issuer
the user configures; here is what it decides with no I/O:

- ``Rule``: who is an administrator (``--oidc-admin``) or may sign in at all
  (``--oidc-allow``), by a claim of the ID token: ``email:alice@example.com`` (verified),
  ``group:llm-admins`` (the ``groups`` claim), ``sub:1234``, or ``everyone``;
- ``check_id_token``: the ID token's signature against the issuer's keys (asymmetric
  algorithms only), its issuer, audience, expiry and nonce;
- ``Sealer``: the console's own cookies (the sign-in's state, then the session), each
  marked with its kind and signed with the session key (its own Secret), so every router
  replica reads them and one kind never passes for the other;
- ``checked_url``: the issuer and its endpoints over https (http on loopback only);
- ``challenge``: PKCE's S256 code challenge (RFC 7636).

No message here holds a token, a secret or a cookie's text.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

import jwt

# what an issuer may sign ID tokens with: never "none", never a shared-secret HMAC
SIGNING_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                      "ES512", "EdDSA")
RULE_KINDS = ("email", "group", "sub")
EVERYONE = "everyone"  # --oidc-allow everyone: each person the issuer signs in may look
SHORTEST_SESSION_KEY = 32  # bytes
LOOPBACK = ("localhost", "127.0.0.1", "::1")
LEEWAY_SECONDS = 60  # clocks of the issuer and the router may differ this much
SESSION_SECONDS = 8 * 3600  # a sign-in lasts a working day; then the issuer is asked again
STATE_SECONDS = 600  # a sign-in started must come back from the issuer within this


class OidcError(ValueError):
    """Sign-in cannot go on; the message says why in plain words (never a token)."""


class UnknownSigningKey(OidcError):
    """The ID token names a key the issuer's key set lacks: read the key set again."""


@dataclass(frozen=True)
class Rule:
    """One claim value that a person's ID token must hold."""

    kind: str  # email | group | sub | everyone
    value: str

    @classmethod
    def parse(cls, text: str) -> Rule:
        if text.strip() == EVERYONE:
            return cls(EVERYONE, "")
        kind, sep, value = text.partition(":")
        if not sep or kind not in RULE_KINDS or not value.strip():
            raise OidcError(f"{text!r}: give KIND:VALUE with KIND one of "
                            f"{', '.join(RULE_KINDS)}, e.g. group:llm-admins or "
                            f"email:alice@example.com (or {EVERYONE} to let anyone look)")
        return cls(kind, value.strip())

    def matches(self, claims: Mapping[str, Any]) -> bool:
        if self.kind == EVERYONE:
            return True
        if self.kind == "sub":
            return claims.get("sub") == self.value
        if self.kind == "email":
            email = verified_email(claims)
            return email is not None and email.lower() == self.value.lower()
        groups = claims.get("groups")
        return isinstance(groups, list) and self.value in groups


@dataclass(frozen=True)
class OidcSettings:
    """An issuer, the console's client at it, who may do what, and the sessions' key."""

    issuer: str
    client_id: str
    client_secret: str = field(repr=False)
    session_key: bytes = field(repr=False)  # signs the console's cookies; not the secret
    allowed: tuple[Rule, ...]  # who may look (Rule("everyone", ""): all who sign in)
    admins: tuple[Rule, ...] = ()  # signed in matching one: every model, every key
    scopes: tuple[str, ...] = ("openid", "email", "profile")
    redirect_url: str | None = None  # where the issuer sends browsers back; else this host's

    def __post_init__(self) -> None:
        checked_url(self.issuer, "issuer")
        if self.redirect_url is not None:
            checked_url(self.redirect_url, "redirect URL")
        if not self.allowed:
            raise OidcError(f"say who may look once signed in: --oidc-allow group:NAME (or "
                            f"email:, sub:), or --oidc-allow {EVERYONE} for everyone the "
                            "issuer signs in")
        if len(self.session_key) < SHORTEST_SESSION_KEY:
            raise OidcError(f"the session key is shorter than {SHORTEST_SESSION_KEY} "
                            "characters; make one with `openssl rand -hex 32`")
        if not self.client_id:
            raise OidcError("give the client id the issuer registered for the console")
        if not self.client_secret:
            raise OidcError("the client secret is empty: the console is a confidential "
                            "client, give the secret the issuer registered")
        if "openid" not in self.scopes:
            raise OidcError(f"scopes {' '.join(self.scopes)!r}: OpenID Connect needs "
                            "the openid scope")



def checked_url(url: str, what: str) -> str:
    """``url`` if it is https, or http to this machine; OidcError otherwise.

    The client secret and ID tokens travel to and from these: never in the clear.
    """
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in LOOPBACK:
        return url
    raise OidcError(f"{what} {url!r}: give an https:// URL (http:// only on this machine, "
                    "for a test issuer), e.g. https://dex.example.com")


@dataclass(frozen=True)
class Person:
    """Who signed in: their issuer's subject, a name to show, and whether they administer."""

    sub: str
    name: str
    admin: bool


def verified_email(claims: Mapping[str, Any]) -> str | None:
    """The email claim, where the issuer says it verified it.

    Some issuers never say so, and let users set any address.
    """
    email = claims.get("email")
    if not isinstance(email, str) or not email or claims.get("email_verified") is not True:
        return None
    return email


def person_of(claims: Mapping[str, Any], settings: OidcSettings) -> Person:
    """Who the ID token says signed in; OidcError if the rules let them not look."""
    sub = str(claims.get("sub") or "")
    if not sub:
        raise OidcError("the ID token names nobody (no sub)")
    name = (verified_email(claims) or claims.get("preferred_username") or claims.get("name")
            or sub)
    admin = any(rule.matches(claims) for rule in settings.admins)
    if not admin and not any(r.matches(claims) for r in settings.allowed):
        raise OidcError(f"{name} signed in, but this console lets only some people look "
                        "(--oidc-allow); ask its operator")
    return Person(sub, str(name), admin)


def new_secret() -> str:
    """A state, nonce or PKCE verifier: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def challenge(verifier: str) -> str:
    """PKCE's S256 code challenge of ``verifier``."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def authorization_url(endpoint: str, settings: OidcSettings, *, redirect_uri: str, state: str,
                      nonce: str, code_challenge: str | None) -> str:
    """Where the browser goes to sign in at the issuer."""
    query = {"response_type": "code", "client_id": settings.client_id,
             "redirect_uri": redirect_uri, "scope": " ".join(settings.scopes),
             "state": state, "nonce": nonce}
    if code_challenge is not None:
        query |= {"code_challenge": code_challenge, "code_challenge_method": "S256"}
    return f"{endpoint}{'&' if '?' in endpoint else '?'}{urlencode(query)}"


def algorithms_of(discovery: Mapping[str, Any]) -> tuple[str, ...]:
    """The signing algorithms both the issuer and the console accept."""
    offered = discovery.get("id_token_signing_alg_values_supported") or ["RS256"]
    accepted = tuple(a for a in offered if a in SIGNING_ALGORITHMS)
    if not accepted:
        raise OidcError(f"the issuer signs ID tokens with {', '.join(map(str, offered))}; "
                        f"the console accepts {', '.join(SIGNING_ALGORITHMS)}")
    return accepted


def check_id_token(token: str, key_set: Mapping[str, Any], *, issuer: str, client_id: str,
                   nonce: str, algorithms: Sequence[str]) -> dict[str, Any]:
    """The ID token's claims, once its signature, issuer, audience, expiry and nonce hold.

    UnknownSigningKey where it names a key ``key_set`` lacks; OidcError otherwise.
    """
    try:
        header = jwt.get_unverified_header(token)
        keys = jwt.PyJWKSet.from_dict(dict(key_set)).keys
    except jwt.PyJWTError as exc:
        raise OidcError(f"the issuer's ID token or key set cannot be read: {exc}") from None
    algorithm, kid = str(header.get("alg")), header.get("kid")
    if algorithm not in algorithms:
        raise OidcError(f"the ID token is signed with {algorithm!r}; accepted: "
                        f"{', '.join(algorithms)}")
    found = [k for k in keys if kid is None or k.key_id == kid]
    if kid is None and len(found) != 1:
        raise OidcError("the ID token names no key and the issuer has several")
    if not found:
        raise UnknownSigningKey(f"the ID token is signed with key {kid!r}, which the "
                                "issuer's key set lacks")
    try:
        claims: dict[str, Any] = jwt.decode(
            token, found[0].key, algorithms=[algorithm], audience=client_id, issuer=issuer,
            leeway=LEEWAY_SECONDS, options={"require": ["exp", "iat", "iss", "aud", "sub"]})
    except jwt.ExpiredSignatureError:
        raise OidcError("the ID token has expired: sign in again (check the router's "
                        "clock)") from None
    except jwt.PyJWTError as exc:
        raise OidcError(f"the ID token is not valid: {exc}") from None
    audience = claims["aud"]
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise OidcError("the ID token was issued to another client (azp)")
    if not hmac.compare_digest(str(claims.get("nonce") or ""), nonce):
        raise OidcError("the ID token does not answer this sign-in (nonce): sign in again")
    return claims


class Sealer:
    """Cookies only this console can have written.

    A JSON payload, its kind ("state", "session") and expiry, and an HMAC over them.
    """

    def __init__(self, key: bytes) -> None:
        self._key = key

    def _mac(self, body: bytes) -> bytes:
        return hmac.new(self._key, body, hashlib.sha256).digest()

    def seal(self, kind: str, payload: Mapping[str, Any], expires_at: float) -> str:
        body = json.dumps({**payload, "typ": kind, "exp": int(expires_at)},
                          separators=(",", ":"), sort_keys=True).encode()
        return f"{_b64(body)}.{_b64(self._mac(body))}"

    def open(self, kind: str, text: str | None, now: float) -> dict[str, Any] | None:
        """The payload of a ``kind`` cookie.

        None where it is absent, altered, signed with another key, of another kind, or
        expired.
        """
        if not text or text.count(".") != 1:
            return None
        body_text, mac_text = text.split(".")
        try:
            body, mac = _unb64(body_text), _unb64(mac_text)
        except ValueError:
            return None
        if not hmac.compare_digest(mac, self._mac(body)):
            return None
        try:
            payload = json.loads(body)
        except ValueError:
            return None
        if not isinstance(payload, dict) or payload.get("typ") != kind \
                or not isinstance(payload.get("exp"), int) or payload["exp"] <= now:
            return None
        return payload


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def rules(texts: Iterable[str]) -> tuple[Rule, ...]:
    return tuple(Rule.parse(t) for t in texts)
