"""The console's pages and their data, as aiohttp routes under /ui/ (jinja2 templates).

``Console.add_routes`` is what `llmop up` and the router hand to ``Gateway.app(more=...)``.
Who may look is the caller's to say (``viewer``): `llmop up` lets every visitor in (it
listens on loopback), the router asks for a valid client key where the gateway has client
keys, or a person signed in at an OpenID Connect issuer, and shows each key the models it
may use (console/sign_in.py). While a page has been asked for in the last
``idle_seconds``, a task reads the gateway's registry and the source every ``every``
seconds (console.series, console.views.History); with no page open, the console costs the
gateway nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import time
from collections.abc import Awaitable, Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

import jinja2
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.console.key_admin import KeyAdmin, KeyPages
from llm_operator.console.oidc_sign_in import OidcSignIn
from llm_operator.console.security import SECURITY_HEADERS
from llm_operator.console.series import (
    CACHED,
    GUARDS,
    LATENCY,
    QUEUE,
    REQUESTS,
    TOKENS,
    TTFT,
    Rolling,
    Totals,
    activations,
    key_use,
    totals,
)
from llm_operator.console.sign_in import SignIn
from llm_operator.console.views import (
    ADMIN,
    EVERYONE,
    History,
    ModelState,
    Source,
    Visitor,
    engine_of,
    key_of,
    plain_words,
    plan_rows,
    spec_document,
    verdict_of,
)
from llm_operator.profiles.planner import Plan

log = logging.getLogger(__name__)
PACKAGE = Path(str(files("llm_operator.console")))
PLANS_KEPT = 1000
READ_SAMPLES = [f"{REQUESTS}_total", f"{LATENCY}_bucket", f"{TTFT}_bucket", f"{TOKENS}_total",
                f"{CACHED}_total", QUEUE, f"{GUARDS}_total"]


def everyone(_: str | None) -> Visitor:
    """`llmop up`'s visitors: every one sees every model."""
    return EVERYONE




class Console:
    """The pages of one gateway: its models (``source``), its figures (``registry``)."""

    def __init__(self, source: Source, registry: CollectorRegistry, *,
                 gateway_url: Callable[[], str], where: str, every: float = 2.0,
                 idle_seconds: float = 120.0,
                 clock: Callable[[], float] = time.time,
                 viewer: Callable[[str | None], Visitor | None] = everyone,
                 batches: Callable[[str], Awaitable[list[dict[str, Any]]]] | None = None,
                 key_admin: KeyAdmin | None = None,
                 slots: Callable[[str], tuple[float, int | None] | None] | None = None,
                 oidc: OidcSignIn | None = None) -> None:
        self.source, self.registry = source, registry
        # the admin token's visitor sees every model and key, and changes keys
        self.key_admin = key_admin
        self.key_pages = None if key_admin is None else KeyPages(
            key_admin, self._admin_page, lambda: list(self.registry.collect()), self._base)
        # only the families the console reads (restricted_registry collects only theirs)
        self._read = registry.restricted_registry(READ_SAMPLES)
        self.batches = batches  # a visitor's batches, newest first (the Batch API's)
        self.slots = slots  # a route's requests at its engines now, and their slots
        self.gateway_url, self.where = gateway_url, where
        self.every, self.idle_seconds, self.clock = every, idle_seconds, clock
        self.rolling = Rolling(keep=max(1, int(600 / every)))  # ten minutes
        self.history = History()
        self._seen = 0.0  # when a page was last asked for
        self._plans: dict[int, tuple[LLMModel, Plan]] = {}
        self._sampling: asyncio.Task[None] | None = None
        self._templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(PACKAGE / "templates"),
            autoescape=True, undefined=jinja2.StrictUndefined,
            trim_blocks=True, lstrip_blocks=True)
        # who looks: a key, the admin token, a person signed in at an issuer (``oidc``)
        self.sign_in = SignIn(self._templates, where, viewer, key_admin=key_admin, oidc=oidc,
                              clock=self._now)
        self._visitor = self.sign_in.visitor

    def _now(self) -> float:
        """The console's clock as it is when asked (a test may set ``clock``)."""
        return self.clock()

    # --- the routes ---------------------------------------------------------------------

    def add_routes(self, router: web.UrlDispatcher) -> None:
        router.add_get("/ui", self._home)
        router.add_get("/ui/", self._home)
        router.add_get("/ui/models", self.models_page)
        router.add_get("/ui/models/rows", self.model_rows)
        router.add_get("/ui/models/{namespace}/{name}", self.model_page)
        router.add_get("/ui/playground", self.playground)
        router.add_get("/ui/batches", self.batches_page)
        router.add_get("/ui/keys", self.keys_page)
        router.add_get("/ui/guardrails", self.guardrails_page)
        router.add_get("/ui/batches/rows", self.batch_rows)
        router.add_get("/ui/api/series", self.series)
        router.add_get("/ui/api/guards", self.guard_series)
        router.add_post("/ui/keys", self.change_keys)
        router.add_post("/ui/keys/{id}/{action}", self.change_keys)
        self.sign_in.add_routes(router)
        router.add_static("/ui/static", PACKAGE / "static", append_version=False)

    async def close(self) -> None:
        await self.sign_in.close()
        if self._sampling is not None:
            self._sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampling
            self._sampling = None

    # --- reading, while someone looks ---------------------------------------------------

    @property
    def reading(self) -> bool:
        """Whether the figures are being read: a page was asked for lately."""
        return self._sampling is not None and not self._sampling.done()

    def _looked(self) -> None:
        """A page was asked for: keep the figures read for ``idle_seconds`` from now."""
        self._seen = self.clock()
        if self._sampling is None or self._sampling.done():
            self.rolling.rebase()  # nothing was read while no page was open
            self.read()  # the first point's baseline, at once
            self._sampling = asyncio.create_task(self._sample(), name="console sampling")

    def read(self) -> None:
        now = self.clock()
        families = list(self._read.collect())
        reading, states = totals(families), self.source.states()
        if self.slots is not None:
            for state in states:
                if state.route is not None and (found := self.slots(state.route)):
                    here = reading.setdefault(state.route, Totals())
                    here.busy, here.slots = found
        self.rolling.add(now, reading)
        self.rolling.add_activations(now, activations(families))
        self.history.add(now, states)

    async def _sample(self) -> None:
        while self.clock() - self._seen < self.idle_seconds:
            await asyncio.sleep(self.every)
            self.read()

    # --- pages --------------------------------------------------------------------------

    def _page(self, template: str, visitor: Visitor = EVERYONE, **values: Any
              ) -> web.Response:
        text = self._templates.get_template(template).render(
            where=self.where, signed_in=visitor.signed_in, person=visitor.person, **values)
        return web.Response(text=text, content_type="text/html", charset="utf-8",
                            headers=SECURITY_HEADERS)

    def _admin_page(self, template: str, **values: Any) -> web.Response:
        return self._page(template, ADMIN, **values)

    def _base(self, request: web.Request) -> str:
        """Where clients reach this gateway: where `llmop up` listens, else this page's host."""
        return self.gateway_url().rstrip("/") or f"{request.scheme}://{request.host}"

    async def _home(self, _: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/ui/models")

    def _plan(self, model: LLMModel) -> Plan:
        """The planner's plan of this very model object, computed once.

        A changed model is a new object, planned again.
        """
        cached = self._plans.get(id(model))
        if cached is None or cached[0] is not model:
            if len(self._plans) > 4 * PLANS_KEPT:  # models gone: forget them all
                self._plans.clear()
            cached = self._plans[id(model)] = (model, verdict_of(model))
        return cached[1]

    def _states(self, visitor: Visitor) -> list[ModelState]:
        return sorted((s for s in self.source.states() if visitor.sees(s)),
                      key=lambda s: key_of(s.model))

    def _rows(self, visitor: Visitor) -> list[dict[str, Any]]:
        rows = []
        for state in self._states(visitor):
            model = state.model
            found = self._plan(model)
            latest = self.rolling.latest(state.route) if state.route else None
            rows.append({
                "key": key_of(model), "namespace": model.namespace, "name": model.name,
                "model_id": model.spec.model_id, "engine": engine_of(model),
                "vendor": "-" if model.spec.is_remote else model.spec.accelerator_vendor,
                "phase": state.phase, "why": plain_words(state),
                "ready": state.ready, "desired": state.desired,
                "verdict": found.verdict, "memory": found.estimated_memory_gib,
                "members": state.members_loaded, "route": state.route or "",
                "latest": latest})
        return rows

    async def models_page(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        self._looked()
        return self._page("models.html", visitor, title="Models", rows=self._rows(visitor))

    async def model_rows(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        self._looked()
        return self._page("model_rows.html", rows=self._rows(visitor))

    async def _batch_rows(self, visitor: Visitor) -> list[dict[str, Any]]:
        if self.batches is None:
            raise web.HTTPNotFound(text="this gateway runs no batches (settings batch."
                                   "enabled)", headers=SECURITY_HEADERS)
        rows = []
        for batch in await self.batches(visitor.owner):
            counts = batch.get("request_counts") or {}
            total, completed, failed = (int(counts.get(k) or 0)
                                        for k in ("total", "completed", "failed"))
            rows.append({**batch, "total": total, "completed": completed, "failed": failed,
                         "done": completed + failed,
                         "created": _clock_time(float(batch.get("created_at") or 0))})
        return rows

    async def batches_page(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        rows = await self._batch_rows(visitor)
        return self._page("batches.html", visitor, title="Batches", rows=rows)

    async def batch_rows(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        return self._page("batch_rows.html", visitor, rows=await self._batch_rows(visitor))

    def _state(self, request: web.Request, visitor: Visitor) -> ModelState:
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        state = next((s for s in self._states(visitor) if key_of(s.model) == key), None)
        if state is None:
            raise web.HTTPNotFound(text=f"no model {key}: the models page lists them",
                                   headers=SECURITY_HEADERS)
        return state

    async def model_page(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        state = self._state(request, visitor)
        self._looked()
        model = state.model
        return self._page(
            "model.html", visitor, title=model.name, state=state, model=model,
            engine=engine_of(model), why=plain_words(state),
            plan=plan_rows(self._plan(model)),
            spec=yaml.safe_dump(spec_document(model), sort_keys=False),
            history=list(reversed(self.history.of(model))), route=state.route or "",
            fmt_time=_clock_time)

    async def keys_page(self, request: web.Request) -> web.Response:
        """The visitor's own key: what it used and spent, and what it may do."""
        visitor = self._visitor(request)
        self._looked()
        if visitor.admin and self.key_pages is not None:
            return await self.key_pages.keys()
        key = visitor.key
        if key is None:
            return self._page("keys.html", visitor, title="Keys", key=None, use=None,
                              budget=None)
        use = key_use(self.registry.collect(), key.id)
        budget = None
        if key.budget is not None:
            spent = use.spend_usd or 0.0
            budget = {"usd": key.budget.usd, "period": key.budget.period, "spent": spent,
                      "share": min(spent / key.budget.usd, 1.0)}
        return self._page("keys.html", visitor, title="Keys", key=key, use=use, budget=budget)

    async def change_keys(self, request: web.Request) -> web.Response:
        """The admin's forms: a key created, disabled, enabled or rotated."""
        if not self._visitor(request).admin or self.key_pages is None:
            raise web.HTTPForbidden(text="changing keys takes the admin token: sign in with "
                                    "it", headers=SECURITY_HEADERS)
        return await self.key_pages.post(request)

    async def guardrails_page(self, request: web.Request) -> web.Response:
        """What each guard found, by route and entity type: counts, never the text."""
        visitor = self._visitor(request)
        visible = {s.route for s in self._states(visitor) if s.route}
        self._looked()
        found = activations(self._read.collect())
        lately = self.rolling.activations_since(found)
        rows = [{"route": k[0], "guard": k[1], "direction": k[2], "action": k[3],
                 "entity": k[4], "total": int(v), "lately": int(lately.get(k, 0))}
                for k, v in sorted(found.items()) if k[0] in visible]
        return self._page("guardrails.html", visitor, title="Guardrails", rows=rows)

    async def playground(self, request: web.Request) -> web.Response:
        visitor = self._visitor(request)
        states = self._states(visitor)
        self._looked()
        models = [s.model.spec.model_id for s in states
                  if s.phase not in ("Failed", "Unplaceable", "Skipped")]
        chosen = request.query.get("model") or ""
        if chosen not in models:  # only a model this visitor may use, never a link's text
            chosen = models[0] if models else ""
        base = self._base(request)
        return self._page("playground.html", visitor, title="Playground", models=models,
                          chosen=chosen, base=base, snippets=snippets(base, chosen))

    async def series(self, request: web.Request) -> web.Response:
        visible = {s.route for s in self._states(self._visitor(request)) if s.route}
        self._looked()
        route = request.query.get("route")
        routes = [r for r in ([route] if route else sorted(self.rolling.points))
                  if r in visible]
        body = {r: [p.as_dict() for p in self.rolling.of(r)] for r in routes}
        return web.json_response(body, headers=SECURITY_HEADERS)


    async def guard_series(self, request: web.Request) -> web.Response:
        """Activations per interval, by guard and entity type, of the visitor's models."""
        visible = {s.route for s in self._states(self._visitor(request)) if s.route}
        self._looked()
        return web.json_response(self.rolling.guard_series(visible), headers=SECURITY_HEADERS)


def _clock_time(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def snippets(base: str, model: str) -> dict[str, str]:
    """The playground's request as curl, the OpenAI SDK and the Anthropic SDK would send it."""
    body = {"model": model, "messages": [{"role": "user", "content": "Hello!"}],
            "stream": True}
    return {
        "curl": (f"curl -sN {base}/v1/chat/completions \\\n"
                 "  -H 'Content-Type: application/json' \\\n"
                 "  -H \"Authorization: Bearer $LLMOP_KEY\" \\\n"
                 f"  -d {shlex.quote(json.dumps(body))}"),
        "OpenAI SDK (Python)": (
            "import os\n\nfrom openai import OpenAI\n\n"
            f"client = OpenAI(base_url=\"{base}/v1\", api_key=os.environ.get(\"LLMOP_KEY\", "
            "\"unused\"))\n"
            f"for chunk in client.chat.completions.create(\n        model={model!r}, "
            "messages=[{\"role\": \"user\", \"content\": \"Hello!\"}], stream=True):\n"
            "    print(chunk.choices[0].delta.content or \"\", end=\"\")"),
        "Anthropic SDK (Python)": (
            "import os\n\nfrom anthropic import Anthropic\n\n"
            f"client = Anthropic(base_url=\"{base}\", api_key=os.environ.get(\"LLMOP_KEY\", "
            "\"unused\"))\n"
            f"with client.messages.stream(model={model!r}, max_tokens=256,\n"
            "        messages=[{\"role\": \"user\", \"content\": \"Hello!\"}]) as stream:\n"
            "    for text in stream.text_stream:\n        print(text, end=\"\")"),
    }
