"""Signing in to the console at an OpenID Connect issuer: a real one (authlib's, in
oidc-provider-mock) on loopback, the authorization code flow as a browser follows it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
import oidc_provider_mock
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer
from oidc_provider_mock import User
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.keyring import digest
from llm_operator.access.keystore import FileKeyStore
from llm_operator.access.oidc import OidcSettings, Rule
from llm_operator.api.validation import parse_llmmodel
from llm_operator.console.key_admin import KeyAdmin
from llm_operator.console.oidc_sign_in import SESSION_COOKIE, STATE_COOKIE, OidcSignIn
from llm_operator.console.pages import Console, everyone
from llm_operator.console.views import ModelState, Visitor
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.router.console_models import key_viewer

from browser import axe_source, chromium, look
from redisserver import free_port
from samples import GUIDE_SAMPLES, load_yaml

SECRET = "console-client-secret-9f8e7d"
SESSION_KEY = b"console-session-key-0123456789abcdef"
USERS = [User(sub=name, claims={"email": f"{name}@example.com", "email_verified": True,
                                "groups": groups})
         for name, groups in (("alice", ["llm-admins", "ml"]), ("bob", ["ml"]), ("eve", []))]
EVERYONE = (Rule("everyone", ""),)


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with oidc_provider_mock.run_server_in_thread(user_claims=USERS,
                                                     require_nonce=True) as server:
            yield f"http://localhost:{server.server_port}"


@dataclass
class Served:
    url: str
    client: aiohttp.ClientSession


class Models:
    def __init__(self) -> None:
        model = parse_llmmodel(load_yaml(GUIDE_SAMPLES[0]))
        self.now = [ModelState(model, "Ready", "", 1, 1, model.name, names=(model.name,))]

    def states(self) -> list[ModelState]:
        return self.now


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, issuer: str, *, keys: bool = True,
                  allowed: tuple[Rule, ...] = EVERYONE,
                  clock: Callable[[], float] = time.time, **settings: Any
                  ) -> AsyncIterator[Served]:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [
        {"id": "team-a", "sha256": digest("sk-llmop-team-a"), "models": ["*"]}]}))
    source, metrics = KeyringSource(path), GatewayMetrics()
    viewer: Any = key_viewer(source.current) if keys else everyone
    oidc = OidcSettings(issuer, "llmop-console", SECRET, SESSION_KEY, allowed,
                        admins=(Rule("group", "llm-admins"),), **settings)
    console = Console(
        Models(), metrics.registry, gateway_url=lambda: "", where="test", every=3600,
        viewer=viewer, oidc=OidcSignIn(oidc, clock=clock),
        key_admin=KeyAdmin(lambda _: False, FileKeyStore(path), source.apply))
    app = web.Application()
    console.add_routes(app.router)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    # unsafe: keep cookies for an address (127.0.0.1), as a browser does
    client = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        yield Served(str(server.make_url("")).rstrip("/"), client)
    finally:
        await client.close()
        await console.close()
        await server.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


async def _to_issuer(served: Served) -> str:
    async with served.client.get(f"{served.url}/ui/oidc/start",
                                 allow_redirects=False) as started:
        assert started.status == 302, await started.text()
        return started.headers["Location"]


async def _sign_in(served: Served, sub: str, *, deny: bool = False
                   ) -> tuple[int, str, str]:
    """Through the issuer's form and back: the callback's status, its text, where to."""
    authorize = await _to_issuer(served)
    form = {"action": "deny"} if deny else {"sub": sub}
    async with served.client.post(authorize, data=form, allow_redirects=False) as chosen:
        assert chosen.status == 302, await chosen.text()
        back = chosen.headers["Location"]
    assert back.startswith(f"{served.url}/ui/oidc/callback?")
    async with served.client.get(back, allow_redirects=False) as answer:
        return answer.status, _text(await answer.text()), answer.headers.get("Location", "")


async def test_a_visitor_is_sent_to_the_issuer_with_state_and_nonce(
        tmp_path: Path, issuer: str) -> None:
    async with serving(tmp_path, issuer) as served:
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 401
            html = await page.text()
        assert 'href="/ui/oidc/start"' in html
        assert f"Sign in with {urlsplit(issuer).netloc}" in _text(html)
        assert 'name="key"' in html  # keys still sign in too
        to = urlsplit(await _to_issuer(served))
        query = parse_qs(to.query)
        assert f"{to.scheme}://{to.netloc}".startswith(issuer)
        assert query["client_id"] == ["llmop-console"]
        assert query["redirect_uri"] == [f"{served.url}/ui/oidc/callback"]
        assert query["scope"] == ["openid email profile"]
        assert len(query["state"][0]) >= 43 and len(query["nonce"][0]) >= 43


@pytest.mark.parametrize(("sub", "admin"), [("alice", True), ("bob", False)])
async def test_a_person_signed_in_sees_the_models_and_an_admin_the_keys(
        tmp_path: Path, issuer: str, sub: str, admin: bool) -> None:
    async with serving(tmp_path, issuer) as served:
        status, text, to = await _sign_in(served, sub)
        assert (status, to) == (303, "/ui/models"), text
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 200
            text = _text(await page.text())
        assert f"{sub}@example.com" in text and "Sign out" in text
        async with served.client.get(f"{served.url}/ui/keys") as keys:
            assert ("team-a" in _text(await keys.text())) is admin
        async with served.client.post(f"{served.url}/ui/keys", data={"id": "new-one"},
                                      headers={"Origin": served.url},
                                      allow_redirects=False) as made:
            assert (made.status == 200) is admin, await made.text()


async def test_signing_out_forgets_the_session_and_an_altered_one_signs_nobody_in(
        tmp_path: Path, issuer: str) -> None:
    async with serving(tmp_path, issuer) as served:
        await _sign_in(served, "bob")
        session = next(c for c in served.client.cookie_jar if c.key == SESSION_COOKIE)
        body, mac = session.value.split(".")
        async with served.client.post(f"{served.url}/ui/logout", allow_redirects=False):
            pass
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 401
        # the session's payload made an admin's, its signature kept: refused
        forged = OidcSignIn(OidcSettings(issuer, "x", SECRET, b"another-key" * 4, EVERYONE)
                            ).sealer.seal("session", {"sub": "bob", "name": "bob@example.com",
                                                      "admin": True}, 2**40).split(".")[0]
        assert forged != body
        async with served.client.get(f"{served.url}/ui/keys",
                                     cookies={SESSION_COOKIE: f"{forged}.{mac}"}) as page:
            assert page.status == 401


@pytest.mark.parametrize(("how", "status", "says"), [
    ("denied", 401, "did not sign you in (access_denied)"),
    ("not allowed", 403, "lets only some people look (--oidc-allow)"),
    ("no state", 400, "not started in this browser"),
])
async def test_a_sign_in_that_fails_says_why_and_signs_nobody_in(
        tmp_path: Path, issuer: str, how: str, status: int, says: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with serving(tmp_path, issuer, allowed=(Rule("group", "ml"),)) as served:
        if how == "no state":  # the issuer's answer brought to another browser
            authorize = await _to_issuer(served)
            served.client.cookie_jar.clear()
            async with served.client.post(authorize, data={"sub": "bob"},
                                          allow_redirects=False) as chosen:
                back = chosen.headers["Location"]
            async with served.client.get(back, allow_redirects=False) as answer:
                got, text = answer.status, _text(await answer.text())
        else:
            got, text, _ = await _sign_in(served, "eve", deny=how == "denied")
        assert got == status and says in text, text
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 401
    assert SECRET not in caplog.text


async def test_where_the_gateway_has_no_keys_every_visitor_signs_in_at_the_issuer(
        tmp_path: Path, issuer: str) -> None:
    async with serving(tmp_path, issuer, keys=False) as served:
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 401
            html = await page.text()
        assert 'href="/ui/oidc/start"' in html
        status, _, _ = await _sign_in(served, "bob")
        assert status == 303
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 200


async def test_an_issuer_that_does_not_answer_is_a_502_that_names_it(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with serving(tmp_path, closed) as served, served.client.get(
            f"{served.url}/ui/oidc/start", allow_redirects=False) as page:
        assert page.status == 502
        text = _text(await page.text())
    assert "discovery document at 127.0.0.1" in text and "did not answer" in text


def test_a_visitor_signed_in_at_the_issuer_is_signed_in() -> None:
    assert Visitor("", lambda _: True, person="bob@example.com").signed_in


async def test_in_chromium_a_person_signs_in_at_the_issuer_and_administers_keys(
        tmp_path: Path, issuer: str) -> None:
    """The issuer on localhost, the console on 127.0.0.1: two sites, as in a cluster, so
    the browser's SameSite rules apply to the way back."""
    async with serving(tmp_path, issuer) as served:
        await asyncio.to_thread(_sign_in_with_chromium, served.url)


def _sign_in_with_chromium(url: str) -> None:
    axe = axe_source()
    with chromium() as driver:
        wait = WebDriverWait(driver, 30)
        driver.get(f"{url}/ui/keys")
        link = wait.until(seen.element_to_be_clickable(
            (By.CSS_SELECTOR, 'a[href="/ui/oidc/start"]')))
        look(driver, axe, "sign-in-oidc")
        link.click()
        wait.until(seen.presence_of_element_located((By.NAME, "sub"))).send_keys("alice")
        driver.find_element(By.XPATH, "//button[normalize-space()='Authorize']").click()
        wait.until(seen.url_to_be(f"{url}/ui/models"))
        assert "alice@example.com" in driver.find_element(By.TAG_NAME, "header").text
        driver.get(f"{url}/ui/keys")
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR, 'tr[data-key="team-a"]')))
        driver.find_element(By.XPATH, "//button[normalize-space()='Sign out']").click()
        wait.until(seen.presence_of_element_located((By.CSS_SELECTOR,
                                                     'a[href="/ui/oidc/start"]')))


async def test_the_sign_ins_state_cookie_never_passes_for_a_session(
        tmp_path: Path, issuer: str) -> None:
    """Both are sealed with one key: each says its kind, and only a session signs in."""
    async with serving(tmp_path, issuer, allowed=(Rule("group", "nobody"),)) as served:
        await _to_issuer(served)
        state = next(c for c in served.client.cookie_jar if c.key == STATE_COOKIE)
        for page in ("models", "playground"):
            async with served.client.get(f"{served.url}/ui/{page}",
                                         cookies={SESSION_COOKIE: state.value}) as answer:
                assert answer.status == 401


@pytest.mark.parametrize(("error", "shown"), [
    ("access_denied", "(access_denied)"),
    ("<script>alert(1)</script>", "(an error)"),
])
async def test_an_error_from_a_link_shows_its_code_only(tmp_path: Path, issuer: str,
                                                       error: str, shown: str) -> None:
    """Anybody can link to the callback: its description is text of theirs, never shown."""
    async with serving(tmp_path, issuer) as served, served.client.get(
            f"{served.url}/ui/oidc/callback", params={
                "error": error, "error_description": "Re-enter your key at evil.example"}
            ) as page:
        text = _text(await page.text())
    assert page.status == 401 and shown in text and "evil.example" not in text


async def test_signing_in_or_out_from_another_site_is_refused(
        tmp_path: Path, issuer: str) -> None:
    async with serving(tmp_path, issuer) as served:
        await _sign_in(served, "bob")
        for form in ("logout", "login"):
            async with served.client.post(f"{served.url}/ui/{form}", data={"key": "k"},
                                          headers={"Sec-Fetch-Site": "cross-site"},
                                          allow_redirects=False) as answer:
                assert answer.status == 403
        async with served.client.get(f"{served.url}/ui/models") as page:
            assert page.status == 200  # still signed in


async def test_failed_callbacks_from_one_address_are_throttled(
        tmp_path: Path, issuer: str) -> None:
    """Each callback may cost the issuer a token request: guessing codes is slowed."""
    async with serving(tmp_path, issuer) as served:
        statuses = []
        for _ in range(11):
            async with served.client.get(f"{served.url}/ui/oidc/callback",
                                         params={"code": "guess", "state": "guess"}) as page:
                statuses.append(page.status)
        assert statuses == [400] * 10 + [429]
        async with served.client.get(f"{served.url}/ui/oidc/start",
                                     allow_redirects=False) as page:
            assert page.status == 429 and "Retry-After" in page.headers


@dataclass
class BadIssuer:
    """An issuer that misbehaves on purpose: its discovery fails until told, its token
    endpoint redirects elsewhere, its key set is larger than any issuer's."""

    url: str = ""
    discovery_fails: bool = True
    token_redirects: bool = True
    discovery_reads: int = 0
    redirected_to: int = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self.discovery)
        app.router.add_post("/token", self.token)
        app.router.add_post("/elsewhere", self.elsewhere)
        app.router.add_get("/keys", self.keys)
        return app

    async def discovery(self, _: web.Request) -> web.Response:
        self.discovery_reads += 1
        if self.discovery_fails:
            return web.json_response({"error": "temporarily_unavailable"}, status=500)
        return web.json_response({
            "issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token", "jwks_uri": f"{self.url}/keys",
            "token_endpoint_auth_methods_supported": ["client_secret_post"]})

    async def token(self, _: web.Request) -> web.Response:
        if not self.token_redirects:
            return web.json_response({"id_token": "x"})
        raise web.HTTPTemporaryRedirect(f"{self.url}/elsewhere")

    async def elsewhere(self, _: web.Request) -> web.Response:
        self.redirected_to += 1
        return web.json_response({"id_token": "x"})

    async def keys(self, _: web.Request) -> web.Response:
        return web.json_response({"keys": [{"kty": "oct", "k": "A" * (2 << 20)}]})


async def test_an_issuer_that_misbehaves_costs_one_read_a_while_and_gets_no_secret(
        tmp_path: Path) -> None:
    bad, now = BadIssuer(), [1000.0]
    server = TestServer(bad.app(), host="127.0.0.1")
    await server.start_server()
    bad.url = str(server.make_url("")).rstrip("/")
    try:
        async with serving(tmp_path, bad.url, clock=lambda: now[0]) as served:
            for _ in range(3):  # a failed discovery is not read again at once
                assert await _start(served) == 502
            assert bad.discovery_reads == 1
            bad.discovery_fails, now[0] = False, now[0] + 11
            # the token endpoint's redirect is not followed with the client secret
            status, text = await _come_back(served)
            assert status == 502 and "token endpoint answered 307" in text, text
            assert bad.redirected_to == 0
            # a key set larger than any issuer's is not read whole
            bad.token_redirects = False
            status, text = await _come_back(served)
            assert status == 502 and "key set answered more than 1 MiB" in text, text
    finally:
        await server.close()


async def _start(served: Served) -> int:
    async with served.client.get(f"{served.url}/ui/oidc/start",
                                 allow_redirects=False) as started:
        return started.status


async def _come_back(served: Served) -> tuple[int, str]:
    """A sign-in started, and the issuer's browser back with a code of its own."""
    to = await _to_issuer(served)
    state = parse_qs(urlsplit(to).query)["state"][0]
    async with served.client.get(f"{served.url}/ui/oidc/callback",
                                 params={"code": "c", "state": state}) as page:
        return page.status, _text(await page.text())
