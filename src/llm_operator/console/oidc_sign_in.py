"""The console's OpenID Connect sign-in: the authorization code flow against the issuer.

``GET /ui/oidc/start`` sends the browser to the issuer with a fresh state, nonce and (where
the issuer offers it) a PKCE challenge, kept in a signed cookie for ten minutes.
``GET /ui/oidc/callback`` checks the state, trades the code for tokens at the issuer's
token endpoint, checks the ID token (access/oidc.py) and keeps who signed in in a signed
session cookie for eight hours. The issuer's discovery document is read once an hour (a
failed read is not tried again for ten seconds); its keys again when an ID token names
one they lack. Answers from the issuer are read up to 1 MiB, never through a redirect,
and only from https endpoints (http on loopback). Failures raise ``SignInFailed``, which
the console shows above its sign-in form.
"""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from aiohttp import web

from llm_operator.access.oidc import (
    SESSION_SECONDS,
    STATE_SECONDS,
    OidcError,
    OidcSettings,
    Person,
    Sealer,
    UnknownSigningKey,
    algorithms_of,
    authorization_url,
    challenge,
    check_id_token,
    checked_url,
    new_secret,
    person_of,
)
from llm_operator.console.security import secure_request

log = logging.getLogger(__name__)
STATE_COOKIE = "llmop_console_oidc"
SESSION_COOKIE = "llmop_console_session"
DISCOVERY_SECONDS = 3600.0
DISCOVERY_AGAIN_SECONDS = 10.0  # after a failed read, visitors get its failure this long
KEYS_AGAIN_SECONDS = 10.0  # an unknown key reads the issuer's keys again, at most this often
LARGEST_ANSWER = 1 << 20  # bytes: a discovery document, a key set, a token answer
ERROR_CODE = re.compile(r"[a-z_]{1,64}")  # OAuth's error codes; anything else is not shown
NO_STORE = {"Cache-Control": "no-store"}
STATE, SESSION = "state", "session"  # the kinds of sealed cookie


class SignInFailed(Exception):
    """The sign-in cannot finish: ``message`` for the visitor, answered with ``status``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message, self.status = message, status


class OidcSignIn:
    """One issuer's sign-in for the console."""

    def __init__(self, settings: OidcSettings, *, clock: Callable[[], float] = time.time,
                 timeout_seconds: float = 10.0) -> None:
        self.settings, self.clock = settings, clock
        self.sealer = Sealer(settings.session_key)
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self._http: aiohttp.ClientSession | None = None
        self._discovery: dict[str, Any] | None = None
        self._discovered_at = 0.0
        self._failed: tuple[float, SignInFailed] | None = None
        self._keys: dict[str, Any] | None = None
        self._keys_at = 0.0

    @property
    def name(self) -> str:
        """The issuer as the sign-in button names it: its host."""
        return urlsplit(self.settings.issuer).netloc

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    # --- who is signed in ---------------------------------------------------------------

    def person(self, request: web.Request) -> Person | None:
        found = self.sealer.open(SESSION, request.cookies.get(SESSION_COOKIE), self.clock())
        if found is None or not found.get("sub"):
            return None
        return Person(str(found.get("sub") or ""), str(found.get("name") or ""),
                      found.get("admin") is True)

    # --- the flow -------------------------------------------------------------------------

    async def start(self, request: web.Request) -> web.HTTPException:
        """To the issuer, with this sign-in's state in a cookie that comes back with it."""
        discovery = await self._discover()
        state, nonce, verifier = new_secret(), new_secret(), new_secret()
        pkce = "S256" in (discovery.get("code_challenge_methods_supported") or [])
        redirect_uri = self.settings.redirect_url or (
            f"{'https' if secure_request(request) else 'http'}://{request.host}"
            "/ui/oidc/callback")
        to = authorization_url(str(discovery["authorization_endpoint"]), self.settings,
                               redirect_uri=redirect_uri, state=state, nonce=nonce,
                               code_challenge=challenge(verifier) if pkce else None)
        answer = web.HTTPFound(to, headers=NO_STORE)
        sealed = self.sealer.seal(STATE, {"state": state, "nonce": nonce, "redirect": redirect_uri,
                                   "verifier": verifier if pkce else ""},
                                  self.clock() + STATE_SECONDS)
        # Lax: the issuer's redirect back is a navigation from another site
        answer.set_cookie(STATE_COOKIE, sealed, path="/ui/oidc", httponly=True,
                          samesite="Lax", secure=secure_request(request),
                          max_age=int(STATE_SECONDS))
        return answer

    async def callback(self, request: web.Request) -> web.HTTPException:
        """Back from the issuer: the code traded, the ID token checked, a session kept."""
        query = request.query
        if "error" in query:  # its code only: the rest is anybody's text in a link
            error = query.get("error") or ""
            said = error if ERROR_CODE.fullmatch(error) else "an error"
            raise SignInFailed(f"The sign-in service did not sign you in ({said}).", 401)
        started = self.sealer.open(STATE, request.cookies.get(STATE_COOKIE), self.clock())
        state, code = query.get("state"), query.get("code")
        if started is None or not state or state != started.get("state") or not code:
            raise SignInFailed("This sign-in was not started in this browser, or took longer "
                               f"than {STATE_SECONDS // 60} minutes: sign in again.", 400)
        tokens = await self._trade(code, str(started["redirect"]),
                                   str(started.get("verifier") or ""))
        id_token = tokens.get("id_token")
        if not isinstance(id_token, str):
            raise SignInFailed("The sign-in service answered without an ID token: does the "
                               "console's client ask for the openid scope?", 502)
        try:
            claims = await self._check(id_token, str(started["nonce"]))
            person = person_of(claims, self.settings)
        except OidcError as exc:
            raise SignInFailed(f"Signing in failed: {exc}.", 403) from None
        log.info("console: %r (subject %r) signed in with OpenID Connect%s", person.name,
                 person.sub, " as an administrator" if person.admin else "")
        answer = web.HTTPSeeOther("/ui/models", headers=NO_STORE)
        answer.del_cookie(STATE_COOKIE, path="/ui/oidc")
        # Lax, not Strict: this answer ends a navigation that began at the issuer
        answer.set_cookie(
            SESSION_COOKIE, self.sealer.seal(SESSION, {"sub": person.sub, "name": person.name,
                                                       "admin": person.admin},
                                             self.clock() + SESSION_SECONDS),
            path="/ui", httponly=True, samesite="Lax", secure=secure_request(request),
            max_age=SESSION_SECONDS)
        return answer

    # --- the issuer -----------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # trust_env: HTTPS_PROXY/NO_PROXY as the router's other calls out take them
            self._http = aiohttp.ClientSession(timeout=self.timeout, trust_env=True)
        return self._http

    async def _json(self, method: str, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
        """The issuer's JSON answer at ``url``; SignInFailed saying what went wrong."""
        try:
            checked_url(url, f"the sign-in service's {what}")
        except OidcError as exc:
            raise SignInFailed(f"{exc}.", 502) from None
        try:
            async with self._client().request(method, url, allow_redirects=False,
                                              **kwargs) as answer:
                data = bytearray()
                async for chunk in answer.content.iter_chunked(1 << 16):
                    data += chunk
                    if len(data) > LARGEST_ANSWER:
                        raise SignInFailed(f"The sign-in service's {what} answered more "
                                           f"than {LARGEST_ANSWER >> 20} MiB.", 502)
                try:
                    body = json.loads(data)
                except ValueError:
                    body = None
                if answer.status >= 300 or not isinstance(body, dict):
                    detail = ""
                    if isinstance(body, dict) and body.get("error"):
                        detail = f": {body.get('error')} {body.get('error_description') or ''}"
                    raise SignInFailed(f"The sign-in service's {what} answered "
                                       f"{answer.status}{detail.rstrip()[:300]}.", 502)
                return body
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SignInFailed(f"The sign-in service's {what} at {urlsplit(url).netloc} "
                               f"did not answer ({type(exc).__name__}): try again, or ask "
                               "the console's operator.", 502) from None

    async def _discover(self) -> dict[str, Any]:
        now = self.clock()
        if self._discovery is not None and now - self._discovered_at < DISCOVERY_SECONDS:
            return self._discovery
        if self._failed is not None and now - self._failed[0] < DISCOVERY_AGAIN_SECONDS:
            raise self._failed[1]
        try:
            found = await self._read_discovery()
        except SignInFailed as exc:
            self._failed = (now, exc)
            raise
        self._discovery, self._discovered_at, self._failed = found, now, None
        return found

    async def _read_discovery(self) -> dict[str, Any]:
        issuer = self.settings.issuer
        found = await self._json("GET", f"{issuer.rstrip('/')}/.well-known/"
                                 "openid-configuration", "discovery document")
        if found.get("issuer") != issuer:
            raise SignInFailed(f"The sign-in service calls itself {found.get('issuer')!r}, "
                               f"not {issuer!r}: give --oidc-issuer exactly as it does.", 502)
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri")
                   if not isinstance(found.get(k), str)]
        if missing:
            raise SignInFailed(f"The sign-in service's discovery document lacks "
                               f"{', '.join(missing)}.", 502)
        try:
            algorithms_of(found)
            for name in ("authorization_endpoint", "token_endpoint", "jwks_uri"):
                checked_url(found[name], f"the sign-in service's {name}")
        except OidcError as exc:
            raise SignInFailed(f"{exc}.", 502) from None
        return found

    async def _trade(self, code: str, redirect_uri: str, verifier: str) -> dict[str, Any]:
        """The issuer's tokens for ``code``, the client authenticated as the issuer asks."""
        discovery = await self._discover()
        form = {"grant_type": "authorization_code", "code": code,
                "redirect_uri": redirect_uri}
        if verifier:
            form["code_verifier"] = verifier
        methods = discovery.get("token_endpoint_auth_methods_supported") or [
            "client_secret_basic"]
        headers = {"Accept": "application/json"}
        if "client_secret_basic" in methods:  # RFC 6749 2.3.1: each part form-encoded
            pair = (f"{quote(self.settings.client_id, safe='')}:"
                    f"{quote(self.settings.client_secret, safe='')}")
            headers["Authorization"] = f"Basic {base64.b64encode(pair.encode()).decode()}"
        else:
            form |= {"client_id": self.settings.client_id,
                     "client_secret": self.settings.client_secret}
        return await self._json("POST", str(discovery["token_endpoint"]), "token endpoint",
                                data=form, headers=headers)

    async def _key_set(self, again: bool) -> dict[str, Any]:
        now = self.clock()
        if self._keys is None or (again and now - self._keys_at >= KEYS_AGAIN_SECONDS):
            discovery = await self._discover()
            self._keys = await self._json("GET", str(discovery["jwks_uri"]), "key set")
            self._keys_at = now
        return self._keys

    async def _check(self, id_token: str, nonce: str) -> dict[str, Any]:
        algorithms = algorithms_of(await self._discover())

        def check(key_set: dict[str, Any]) -> dict[str, Any]:
            return check_id_token(id_token, key_set, issuer=self.settings.issuer,
                                  client_id=self.settings.client_id, nonce=nonce,
                                  algorithms=algorithms)
        try:
            return check(await self._key_set(again=False))
        except UnknownSigningKey:  # a key the issuer added since: its key set read again
            return check(await self._key_set(again=True))
