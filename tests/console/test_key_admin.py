"""The admin's keys page: every key listed, keys created, disabled, enabled and rotated,
written where the gateway reads them, and a new key shown once, never kept."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from llm_operator.access.keyfile import KeyringSource
from llm_operator.access.keyring import KEY_PREFIX, digest
from llm_operator.access.keystore import FileKeyStore
from llm_operator.api.validation import parse_llmmodel
from llm_operator.console.key_admin import KeyAdmin
from llm_operator.console.pages import Console
from llm_operator.console.views import ModelState
from llm_operator.gateway.telemetry.metrics import GatewayMetrics
from llm_operator.router.console_models import key_viewer

from samples import GUIDE_SAMPLES, load_yaml

TOKEN = "admin-token-0123456789abcdef"
TEAM = "sk-llmop-team-a"


@dataclass
class Models:
    now: list[ModelState]

    def states(self) -> Sequence[ModelState]:
        return self.now


@dataclass
class Served:
    url: str
    path: Path
    source: KeyringSource
    metrics: GatewayMetrics


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Served]:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [
        {"id": "team-a", "sha256": digest(TEAM), "models": ["gpt-5.5"],
         "budget": {"usd": 20.0, "period": "month"}},
        {"id": "old", "sha256": digest("sk-llmop-old"), "disabled": True}]}))
    source, metrics = KeyringSource(path), GatewayMetrics()
    model = parse_llmmodel(load_yaml(GUIDE_SAMPLES[0]))
    console = Console(
        Models([ModelState(model, "Ready", "", 1, 1, model.name, names=(model.name,))]),
        metrics.registry, gateway_url=lambda: "http://gw.example:8000", where="test",
        every=3600, viewer=key_viewer(source.current),
        key_admin=KeyAdmin(lambda given: given == TOKEN, FileKeyStore(path), source.apply))
    app = web.Application()
    console.add_routes(app.router)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield Served(str(server.make_url("")).rstrip("/"), path, source, metrics)
    finally:
        await console.close()
        await server.close()


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def _admin(served: Served) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}",
                                          "Origin": served.url})


def _shown_key(html: str) -> str:
    found = re.search(r'<code id="secret">([^<]+)</code>', html)
    assert found is not None, html
    return found.group(1)


async def test_the_admin_signs_in_with_the_token_and_sees_every_key_and_its_use(
        tmp_path: Path) -> None:
    async with serving(tmp_path) as served, aiohttp.ClientSession(
            cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
        served.metrics.key_requests.labels("team-a", "200").inc(7)
        served.metrics.key_spend.labels("team-a").set(5.0)
        async with http.post(f"{served.url}/ui/login", data={"key": TOKEN},
                             allow_redirects=False) as r:
            assert r.status == 303
        async with http.get(f"{served.url}/ui/keys") as r:
            html = await r.text()
        text = _text(html)
    assert r.status == 200 and TOKEN not in html
    assert "team-a enabled 7 0 25.0% $5.00 of $20.00/month gpt-5.5 none" in text
    assert "old disabled 0 0 $0.00 no budget every model" in text
    assert 'action="/ui/keys/old/enable"' in html and 'action="/ui/keys/team-a/disable"' in html
    assert "Create a key" in text


async def test_a_client_key_sees_only_its_own_and_may_change_none(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, aiohttp.ClientSession(headers={
            "Authorization": f"Bearer {TEAM}", "Origin": ""}) as http:
        before = served.path.read_text()
        async with http.get(f"{served.url}/ui/keys") as r:
            text = _text(await r.text())
        assert "The key you signed in with" in text and "old" not in text
        for path in ("/ui/keys", "/ui/keys/team-a/rotate", "/ui/keys/old/enable"):
            async with http.post(f"{served.url}{path}", data={"id": "mine"},
                                 headers={"Origin": served.url}) as r:
                assert r.status == 403, path
        assert served.path.read_text() == before


async def test_a_created_key_is_shown_once_written_as_a_digest_and_admitted_at_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serving(tmp_path) as served, _admin(served) as http:
        async with http.post(f"{served.url}/ui/keys", data={
                "id": "search", "models": "gpt-*, llama-*", "rpm": "600", "tpm": "",
                "budget": "50", "period": "week"}) as r:
            assert r.status == 200
            html = await r.text()
            assert r.headers["Cache-Control"] == "no-store"
        key = _shown_key(html)
        assert key.startswith(KEY_PREFIX)
        assert f'curl -s http://gw.example:8000/v1/models -H "Authorization: Bearer {key}"' \
            in html
        stored = yaml.safe_load(served.path.read_text())["keys"][-1]
        assert stored == {"id": "search", "sha256": digest(key), "models": ["gpt-*", "llama-*"],
                          "requestsPerMinute": 600, "budget": {"usd": 50.0, "period": "week"}}
        found = served.source.current().find(key)  # in force before any re-read
        assert found is not None and found.id == "search"
        async with http.get(f"{served.url}/ui/keys") as r:
            assert key not in await r.text()  # shown once
    assert "created client key search" in caplog.text and key not in caplog.text


async def test_a_disabled_key_is_refused_an_enabled_one_admitted_a_rotated_one_replaced(
        tmp_path: Path) -> None:
    async with serving(tmp_path) as served, _admin(served) as http:
        async with http.post(f"{served.url}/ui/keys/team-a/disable",
                             allow_redirects=False) as r:
            assert r.status == 303 and r.headers["Location"] == "/ui/keys"
        assert served.source.current().find(TEAM) is None
        async with aiohttp.ClientSession() as team, team.get(
                f"{served.url}/ui/models", headers={"Authorization": f"Bearer {TEAM}"}) as r:
            assert r.status == 401  # the console asks for a key again
        async with http.post(f"{served.url}/ui/keys/team-a/enable") as r:
            assert r.status == 200  # the keys page, after the redirect
        assert served.source.current().find(TEAM) is not None
        async with http.post(f"{served.url}/ui/keys/team-a/rotate") as r:
            key = _shown_key(await r.text())
        ring = served.source.current()
        new = ring.find(key)
        assert ring.find(TEAM) is None and new is not None and new.id == "team-a"
        assert new.budget is not None and new.budget.usd == 20.0  # its allowances kept


@pytest.mark.parametrize(("path", "form", "says"), [
    ("/ui/keys", {"id": "team-a"}, "a key 'team-a' exists already: rotate it"),
    ("/ui/keys", {"id": "bad id!"}, "use letters, digits"),
    ("/ui/keys", {"id": "ok", "rpm": "many"}, "requests per minute: 'many' is not a number"),
    ("/ui/keys", {"id": "ok", "tpm": "0"}, "tokens per minute: give a number above 0"),
    ("/ui/keys", {"id": "ok", "budget": "-3"}, "budget (USD): give a number above 0"),
    ("/ui/keys", {"id": "ok", "period": "year"}, "budget period: choose one of"),
    ("/ui/keys/nobody/rotate", {}, "no key 'nobody'"),
    ("/ui/keys/nobody/disable", {}, "no key 'nobody'"),
])
async def test_a_form_the_keys_file_cannot_take_says_what_to_fix_and_writes_nothing(
        tmp_path: Path, path: str, form: dict[str, str], says: str) -> None:
    async with serving(tmp_path) as served, _admin(served) as http:
        before = served.path.read_text()
        async with http.post(f"{served.url}{path}", data=form) as r:
            assert r.status == 400
            text = _text(await r.text())
        assert says in text and "team-a" in text  # the keys page, with why above it
        assert served.path.read_text() == before


async def test_a_form_posted_from_another_site_changes_nothing(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, aiohttp.ClientSession(headers={
            "Authorization": f"Bearer {TOKEN}"}) as http:
        before = served.path.read_text()
        for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                        {"Origin": "null"}):  # a sandboxed or no-referrer page elsewhere
            async with http.post(f"{served.url}/ui/keys/team-a/disable", headers=headers,
                                 allow_redirects=False) as r:
                assert r.status == 403
        assert served.path.read_text() == before


async def test_an_unknown_action_is_not_found(tmp_path: Path) -> None:
    async with serving(tmp_path) as served, _admin(served) as http, http.post(
            f"{served.url}/ui/keys/team-a/delete") as r:
        status: Any = r.status
    assert status == 404
