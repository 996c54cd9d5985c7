"""OpenID Connect's pure part: who is an administrator, which ID tokens hold, sealed cookies."""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from llm_operator.access.oidc import (
    OidcError,
    OidcSettings,
    Rule,
    Sealer,
    UnknownSigningKey,
    algorithms_of,
    authorization_url,
    challenge,
    check_id_token,
    checked_url,
    person_of,
)

ISSUER, CLIENT, NONCE = "https://issuer.example", "llmop-console", "n-0S6_WzA2Mj"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
OTHER = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _jwk(key: rsa.RSAPrivateKey, kid: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    return {**found, "kid": kid, "use": "sig", "alg": "RS256"}


KEYS = {"keys": [_jwk(KEY, "k1")]}


def _token(*, key: Any = KEY, kid: str | None = "k1", algorithm: str = "RS256",
           **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": CLIENT, "sub": "alice", "iat": now, "exp": now + 300,
              "nonce": NONCE, **changes}
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode(claims, key, algorithm=algorithm,
                      headers=None if kid is None else {"kid": kid})


def _check(token: str, keys: dict[str, Any] = KEYS) -> dict[str, Any]:
    return check_id_token(token, keys, issuer=ISSUER, client_id=CLIENT, nonce=NONCE,
                          algorithms=("RS256",))


def test_a_token_signed_by_the_issuers_key_for_this_client_and_sign_in_holds() -> None:
    assert _check(_token())["sub"] == "alice"
    assert _check(_token(kid=None))["sub"] == "alice"  # one key: the token need not name it
    assert _check(_token(aud=[CLIENT, "other"], azp=CLIENT))["sub"] == "alice"


@pytest.mark.parametrize(("token", "says"), [
    (_token(aud="another-client"), "Audience"),
    (_token(iss="https://elsewhere.example"), "issuer"),
    (_token(exp=int(time.time()) - 3600), "expired"),
    (_token(nonce="another sign-in"), "nonce"),
    (_token(nonce=None), "nonce"),
    (_token(sub=None), "sub"),
    (_token(key=OTHER), "Signature verification failed"),
    (_token(aud=[CLIENT, "other"]), "azp"),
    # no signature at all, and a shared-secret HMAC (the public key as its secret)
    (_token(key=None, algorithm="none"), "'none'"),
    (_token(key="k" * 32, algorithm="HS256"), "'HS256'"),
    ("not.a.token", "cannot be read"),
])
def test_a_token_that_does_not_hold_is_refused_saying_why(token: str, says: str) -> None:
    with pytest.raises(OidcError, match=says) as refused:
        _check(token)
    assert token not in str(refused.value)


def test_a_key_the_set_lacks_asks_for_the_set_again() -> None:
    with pytest.raises(UnknownSigningKey, match="'k2'"):
        _check(_token(key=OTHER, kid="k2"))
    assert _check(_token(key=OTHER, kid="k2"), {"keys": [*KEYS["keys"], _jwk(OTHER, "k2")]})
    with pytest.raises(OidcError, match="names no key"):
        _check(_token(kid=None), {"keys": [*KEYS["keys"], _jwk(OTHER, "k2")]})


@pytest.mark.parametrize(("offered", "accepted"), [
    (None, ("RS256",)),
    (["RS256", "HS256", "none", "ES256"], ("RS256", "ES256")),
])
def test_only_asymmetric_algorithms_the_issuer_offers_are_accepted(
        offered: list[str] | None, accepted: tuple[str, ...]) -> None:
    assert algorithms_of({"id_token_signing_alg_values_supported": offered}) == accepted


def test_an_issuer_signing_only_with_shared_secrets_is_refused() -> None:
    with pytest.raises(OidcError, match="HS256"):
        algorithms_of({"id_token_signing_alg_values_supported": ["HS256"]})


VERIFIED = {"email_verified": True}


@pytest.mark.parametrize(("text", "claims", "matches"), [
    ("email:Alice@Example.com", {"email": "alice@example.com", **VERIFIED}, True),
    ("email:alice@example.com", {"email": "alice@example.com", "email_verified": False},
     False),
    # an issuer that does not say it verified the address (some let users set any)
    ("email:alice@example.com", {"email": "alice@example.com"}, False),
    ("everyone", {"sub": "anyone"}, True),
    ("group:llm-admins", {"groups": ["dev", "llm-admins"]}, True),
    ("group:llm-admins", {"groups": "llm-admins"}, False),  # not a list: no groups
    ("sub:1234", {"sub": "1234"}, True),
    ("sub:1234", {"sub": "12345"}, False),
])
def test_a_rule_matches_one_claim(text: str, claims: dict[str, Any], matches: bool) -> None:
    assert Rule.parse(text).matches(claims) is matches


@pytest.mark.parametrize("text", ["alice@example.com", "role:admin", "group:", ":x",
                                  "everyone:x"])
def test_a_rule_that_is_not_kind_and_value_says_how_to_write_one(text: str) -> None:
    with pytest.raises(OidcError, match="KIND:VALUE"):
        Rule.parse(text)


def _settings(**changes: Any) -> OidcSettings:
    return OidcSettings(**{"issuer": ISSUER, "client_id": CLIENT, "client_secret": "s3cret",
                           "session_key": b"k" * 32, "allowed": (Rule("everyone", ""),),
                           **changes})


def test_who_signed_in_is_named_by_email_then_username_and_admins_are_marked() -> None:
    settings = _settings(admins=(Rule("group", "llm-admins"),))
    alice = person_of({"sub": "1", "email": "a@x.io", **VERIFIED, "groups": ["llm-admins"]},
                      settings)
    assert (alice.name, alice.admin) == ("a@x.io", True)
    bob = person_of({"sub": "2", "email": "b@x.io", "preferred_username": "bob"}, settings)
    assert (bob.name, bob.admin) == ("bob", False)
    assert person_of({"sub": "3"}, settings).name == "3"
    with pytest.raises(OidcError, match="no sub"):
        person_of({"email": "x@x.io", **VERIFIED}, settings)


def test_with_allow_rules_only_those_matching_or_admins_may_look() -> None:
    settings = _settings(admins=(Rule("sub", "root"),), allowed=(Rule("group", "ml"),))
    assert person_of({"sub": "1", "groups": ["ml"]}, settings).name == "1"
    assert person_of({"sub": "root"}, settings).admin
    with pytest.raises(OidcError, match="--oidc-allow"):
        person_of({"sub": "2", "email": "eve@x.io"}, settings)


@pytest.mark.parametrize(("changes", "says"), [
    ({"issuer": "dex.example.com"}, "give an https:// URL"),
    ({"issuer": "http://dex.example.com"}, "http:// only on this machine"),
    ({"redirect_url": "http://gw.example.com/ui/oidc/callback"}, "redirect URL"),
    ({"allowed": ()}, "--oidc-allow everyone"),
    ({"session_key": b"short"}, "openssl rand -hex 32"),
    ({"client_id": ""}, "client id"),
    ({"client_secret": ""}, "secret is empty"),
    ({"scopes": ("email",)}, "openid scope"),
])
def test_settings_that_cannot_sign_anyone_in_are_refused(changes: dict[str, Any],
                                                         says: str) -> None:
    with pytest.raises(OidcError, match=says):
        _settings(**changes)


def test_the_client_secret_and_session_key_are_never_shown() -> None:
    assert "s3cret" not in repr(_settings()) and "kkkk" not in repr(_settings())


@pytest.mark.parametrize(("url", "fine"), [
    ("https://dex.example.com", True),
    ("http://localhost:9400", True),
    ("http://127.0.0.1:9400/token", True),
    ("http://[::1]:9400", True),
    ("http://dex.example.com", False),
    ("http://localhost.evil.example", False),
    ("ftp://dex.example.com", False),
    ("https://", False),
])
def test_the_issuer_and_its_endpoints_are_https_or_this_machine(url: str, fine: bool) -> None:
    if fine:
        assert checked_url(url, "issuer") == url
    else:
        with pytest.raises(OidcError, match="https://"):
            checked_url(url, "issuer")


def test_pkce_s256_is_rfc_7636s_example() -> None:
    assert challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk") == \
        "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_the_authorization_url_asks_for_a_code_with_state_nonce_and_challenge() -> None:
    url = authorization_url("https://issuer.example/auth?prompt=login", _settings(),
                            redirect_uri="https://gw/ui/oidc/callback", state="s",
                            nonce="n", code_challenge="c")
    assert url == ("https://issuer.example/auth?prompt=login&response_type=code&client_id="
                   "llmop-console&redirect_uri=https%3A%2F%2Fgw%2Fui%2Foidc%2Fcallback&"
                   "scope=openid+email+profile&state=s&nonce=n&code_challenge=c&"
                   "code_challenge_method=S256")


def test_a_sealed_cookie_opens_only_unaltered_of_its_kind_with_its_key_before_it_expires(
        ) -> None:
    sealer = Sealer(b"k" * 32)
    sealed = sealer.seal("session", {"sub": "alice", "admin": True}, expires_at=1000)
    assert sealer.open("session", sealed, now=999) == {
        "sub": "alice", "admin": True, "exp": 1000, "typ": "session"}
    assert sealer.open("session", sealed, now=1000) is None
    assert sealer.open("state", sealed, now=0) is None  # one kind never passes for another
    assert Sealer(b"j" * 32).open("session", sealed, 0) is None
    body, mac = sealed.split(".")
    forged = Sealer(b"x").seal("session", {"sub": "mallory", "admin": True}, 1000)
    for text in (f"{forged.split('.')[0]}.{mac}", f"{body}.{mac[:-2]}", f"{body}x.{mac}", "",
                 "a.b.c", "!!.??", None):
        assert sealer.open("session", text, now=0) is None
