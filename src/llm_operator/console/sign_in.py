"""Who looks at the console: the sign-in page, keys in a cookie, people from an issuer.

``SignIn.visitor`` says what a request may see, from (in this order) a key in its
``Authorization`` header, a session of a person signed in at an OpenID Connect issuer
(console/oidc_sign_in.py), or a key typed once into the sign-in form and kept in an
HttpOnly cookie for /ui; else it answers the sign-in page (401). Keys that are not valid
count against the visitor's address (console/throttle.py), and so do failed sign-ins at
the issuer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import jinja2
from aiohttp import web

from llm_operator.access.keyring import presented_key
from llm_operator.console.key_admin import KeyAdmin
from llm_operator.console.oidc_sign_in import SESSION_COOKIE, OidcSignIn, SignInFailed
from llm_operator.console.security import SECURITY_HEADERS, same_origin, secure_request
from llm_operator.console.throttle import SignInThrottle
from llm_operator.console.views import ADMIN, EVERYONE, Visitor

log = logging.getLogger("llm_operator.console.pages")
COOKIE = "llmop_console_key"
NOT_VALID = ("That key is not valid (unknown, revoked or disabled): ask the gateway's "
             "operator for one.")
LOGIN_STATUSES: dict[int, type[web.HTTPException]] = {
    400: web.HTTPBadRequest, 401: web.HTTPUnauthorized, 403: web.HTTPForbidden,
    429: web.HTTPTooManyRequests, 502: web.HTTPBadGateway}


class SignIn:
    """The console's sign-in: its page, its routes, and who each request comes from."""

    def __init__(self, templates: jinja2.Environment, where: str,
                 viewer: Callable[[str | None], Visitor | None], *,
                 key_admin: KeyAdmin | None, oidc: OidcSignIn | None,
                 clock: Callable[[], float]) -> None:
        self.templates, self.where, self.viewer = templates, where, viewer
        self.key_admin = key_admin
        # signing in at an issuer: then every visitor signs in, keys or not
        self.oidc = oidc
        self.clock = clock
        self.throttle = SignInThrottle()

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_post("/ui/login", self._login)
        router.add_post("/ui/logout", self._logout)
        if self.oidc is not None:
            router.add_get("/ui/oidc/start", self._oidc_start)
            router.add_get("/ui/oidc/callback", self._oidc_callback)

    async def close(self) -> None:
        if self.oidc is not None:
            await self.oidc.close()

    def visitor(self, request: web.Request) -> Visitor:
        """What the visitor may see; the login page (401) when they must say who they are.

        The key as the gateway's API takes it (a header), else who signed in at the
        OpenID Connect issuer, else the key in the console's cookie. A cookie that no
        longer signs in (its key disabled, rotated) is forgotten.
        """
        header = presented_key(request.headers)
        if header is None and self.oidc is not None:
            person = self.oidc.person(request)
            if person is not None:
                return Visitor("", lambda _: True, admin=person.admin, person=person.name)
        given = header or request.cookies.get(COOKIE)
        visitor = self._checked(request, given)
        if visitor is None:
            refused = self.page(
                NOT_VALID if given else "This gateway asks for a client key."
                if self.oidc is None else "Sign in to see this gateway's models.")
            if request.cookies.get(COOKIE):
                refused.del_cookie(COOKIE, path="/ui")
            raise refused
        return visitor

    def _checked(self, request: web.Request, given: str | None) -> Visitor | None:
        """``_who``, counting the keys that are not valid by the visitor's address.

        Past the throttle's limit another such key is answered 429. A valid key always
        signs in: behind a proxy every visitor may share one address.
        """
        visitor = self._who(given)
        if visitor is not None or not given:
            return visitor
        self._throttled(request)
        address = request.remote or ""
        self.throttle.failed(address, self.clock())
        log.warning("console: a sign-in from %s failed (key not valid)", address)
        return None

    def _who(self, given: str | None) -> Visitor | None:
        """The admin token's visitor, a key's, everyone's, or None (not valid).

        Everyone's is None where an OpenID Connect issuer is configured: sign in there.
        """
        if self.key_admin is not None and self.key_admin.token(given):
            return ADMIN
        visitor = self.viewer(given)
        if visitor is EVERYONE and self.oidc is not None:
            return None
        return visitor

    def page(self, message: str, status: int = 401, retry_after: int = 0
                    ) -> web.HTTPException:
        """The sign-in form, answered 401 (or 429: wait) with ``message`` above it."""
        text = self.templates.get_template("login.html").render(
            where=self.where, title="Sign in", message=message, signed_in=False, person="",
            admin=self.key_admin is not None, keys=self._asks_keys(),
            oidc=self.oidc.name if self.oidc is not None else "")
        headers = dict(SECURITY_HEADERS)
        if status == 429:
            headers["Retry-After"] = str(retry_after)
        if status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        return LOGIN_STATUSES[status](text=text, content_type="text/html", headers=headers)

    def _asks_keys(self) -> bool:
        """Whether a key (a client key, the admin token) signs in here."""
        return self.viewer(None) is not EVERYONE or self.key_admin is not None

    async def _login(self, request: web.Request) -> web.StreamResponse:
        """POST /ui/login (a form with ``key``): the key in a cookie for /ui, if valid."""
        self._same_origin(request)  # no other site signs a browser in with its key
        form = await request.post()
        given = str(form.get("key") or "").strip()
        if not given or self._checked(request, given) is None:
            raise self.page(NOT_VALID)
        answer = web.HTTPSeeOther("/ui/models", headers=SECURITY_HEADERS)
        answer.set_cookie(COOKIE, given, path="/ui", httponly=True, samesite="Strict",
                          secure=secure_request(request))
        raise answer

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        self._same_origin(request)  # no other site signs a visitor out
        answer = web.HTTPSeeOther("/ui/models", headers=SECURITY_HEADERS)
        answer.del_cookie(COOKIE, path="/ui")
        answer.del_cookie(SESSION_COOKIE, path="/ui")
        raise answer

    def _same_origin(self, request: web.Request) -> None:
        if not same_origin(request):
            raise web.HTTPForbidden(text="this form is taken only from the console's own "
                                    "pages", headers=SECURITY_HEADERS)

    def _throttled(self, request: web.Request) -> None:
        """429 where the visitor's address failed to sign in too often lately."""
        wait = self.throttle.wait(request.remote or "", self.clock())
        if wait > 0:
            raise self.page(
                f"Too many failed sign-ins from your address: try again in "
                f"{math.ceil(wait)} s.", status=429, retry_after=math.ceil(wait))

    async def _oidc_start(self, request: web.Request) -> web.StreamResponse:
        """GET /ui/oidc/start: to the issuer's sign-in."""
        assert self.oidc is not None
        self._throttled(request)
        try:
            raise await self.oidc.start(request)
        except SignInFailed as exc:
            raise self.page(exc.message, exc.status) from None

    async def _oidc_callback(self, request: web.Request) -> web.StreamResponse:
        """GET /ui/oidc/callback: back from the issuer, signed in or told why not.

        A failure counts against the visitor's address, as a key that is not valid does:
        each callback may cost the issuer a token request.
        """
        assert self.oidc is not None
        self._throttled(request)
        try:
            raise await self.oidc.callback(request)
        except SignInFailed as exc:
            self.throttle.failed(request.remote or "", self.clock())
            log.warning("console: a sign-in at the issuer from %s failed (%s)",
                        request.remote, exc.status)
            raise self.page(exc.message, exc.status) from None
