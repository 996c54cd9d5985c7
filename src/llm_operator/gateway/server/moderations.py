"""POST /v1/moderations in OpenAI's shape: the named model's guardrails run over ``input``.

Who may ask, and about which model, is decided by the request path's own parts (Identify,
Classify, ReadBody, Resolve): a client key sees the models it may use. A check then costs
what a request does: it counts against the key's rate limits and budget (Limit) and takes
a flow-control slot of the model's pool under the client's band and fairness ID (Slot), and
a judge it asks queues as that client's. Every guard of the model runs
(its input and output guards, once each by name; a judge reads the input as a user's),
nothing is masked or refused, and a key's exemptGuards do not apply: the caller asked for
the check. Categories: ``pii`` for the PII guards, each judge's own (Llama Guard's codes,
Granite's risks, ShieldGemma's policies) and each moderation guard's (OpenAI's); which
guards found what is in ``llmop`` beside OpenAI's fields.

A remote model without guardrails (every deployment an OpenAI-compatible API with a key:
OpenAI's omni-moderation-latest declared as a remote LLMModel, say) is asked itself: the
request goes through the request path like any other, to its ``/moderations``. That is how
a moderation guard's model is reached through a remote model's own gateway (the MCP
server's path) and how clients use a frontier moderation API through the gateway.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from aiohttp import web

from llm_operator.api.guardrails import GuardSpec
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.inbound.incoming import Incoming
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.path.parts.guard import too_long, unavailable
from llm_operator.gateway.path.parts.slot import Slot
from llm_operator.gateway.path.request_path import Check, first_answer
from llm_operator.gateway.routing.routes import Clock, RouteState
from llm_operator.guardrails.guards import Activation
from llm_operator.guardrails.runner import Guarding, GuardUnavailable, TextTooLong
from llm_operator.guardrails.text import Spot

Handler = Callable[[Incoming], Awaitable[web.StreamResponse]]
PII = "pii"  # the category of every PII guard; a judge's are its own


def _texts(body: dict[str, Any]) -> list[str] | str:
    """``input`` as texts (a string, strings, or OpenAI's text parts), or what is wrong."""
    given = body.get("input")
    if isinstance(given, str):
        return [given]
    if isinstance(given, list) and given:
        texts = []
        for index, item in enumerate(given):
            if isinstance(item, str):
                texts.append(item)
            elif isinstance(item, dict) and item.get("type") == "text" \
                    and isinstance(item.get("text"), str):
                texts.append(item["text"])
            elif isinstance(item, dict) and item.get("type") == "image_url":
                return f"input[{index}]: images are not checked here; send text only"
            else:
                return f"input[{index}]: expected a string or {{type: text, text: ...}}"
        return texts
    return "input: expected a string or a non-empty list of strings"


def _result(guards: Sequence[GuardSpec], found: Sequence[Activation]) -> dict[str, Any]:
    """One input's result: ``pii`` and each judge's categories, flagged where found."""
    flags: dict[str, bool] = {}
    scores: dict[str, float] = {}
    for guard in guards:
        for category in guard.categories:
            flags.setdefault(category, False)
            scores.setdefault(category, 0.0)
    by_name = {g.name: g for g in guards}
    for activation in found:
        named = (PII,) if by_name[activation.guard].pii is not None else activation.entities
        for category in named:
            flags[category] = True
            scores[category] = max(scores.get(category, 0.0), activation.score)
    return {"flagged": bool(found), "categories": flags, "category_scores": scores,
            "category_applied_input_types": {c: ["text"] for c in flags},
            "llmop": {"guards": [{"name": a.guard, "entities": list(a.entities),
                                  "score": a.score} for a in found]}}


def _asks_upstream(state: RouteState) -> bool:
    """A remote model without guardrails: its own moderation API answers."""
    deployments = state.deployments
    return state.route.guardrails is None and bool(deployments) and all(
        d.native is None and d.key is not None for d in deployments)


class Moderations:
    """The handler: the checks (who, which model), the key's limits, every guard of the model.

    ``forward``: the request path (path/request_path.py), for a remote model without guards, which
    counts the request itself; ``limit``: the budget and rate limits a check counts against;
    ``slot``: flow control's slot a check holds while it runs.
    """

    def __init__(self, checks: Sequence[Check], guarding: Guarding, clock: Clock,
                 forward: Handler, *, limit: Check | None = None,
                 slot: Slot | None = None
                 ) -> None:
        self.checks, self.guarding, self._clock = tuple(checks), guarding, clock
        self.forward, self.limit, self.slot = forward, limit, slot

    async def handle(self, request: Incoming) -> web.StreamResponse:
        ex = Exchange(request, self._clock(), None)
        refused = await first_answer(self.checks, ex)
        if refused is not None:
            return refused
        texts = _texts(ex.body)
        if isinstance(texts, str):
            return error_response(400, texts, "invalid_request_error", "invalid_input",
                                  param="input")
        if _asks_upstream(ex.state):
            return await self.forward(request)  # the request path counts it as a request
        try:
            if self.limit is not None and (
                    spent := await first_answer((self.limit,), ex)) is not None:
                return spent  # checked here: it costs the key a request, as any other
            if self.slot is None:
                return await self._checked(ex, texts)
            lease = self.slot.now(ex)
            if lease is None:  # the pool is full: its turn, or flow control's 429 or 503
                granted = await self.slot.wait(ex)
                if isinstance(granted, web.Response):
                    return granted
                lease = granted
            try:
                return await self._checked(ex, texts)
            finally:
                lease.release()
        finally:
            ex.reservation.settle()  # a check uses no tokens of the model's

    async def _checked(self, ex: Exchange, texts: list[str]) -> web.StreamResponse:
        """Every guard of the route over each text, in OpenAI's moderation shape."""
        guardrails = ex.state.route.guardrails
        guards = guardrails.every_guard if guardrails is not None else ()
        size = sum(len(text) for text in texts)
        if guardrails is not None and size > guardrails.max_checked_chars:
            return too_long(TextTooLong(size, guardrails.max_checked_chars))
        results = []
        for text in texts:
            found: list[Activation] = []
            if guards:
                holder = [text]
                try:
                    checked = await self.guarding.check(
                        ex.state.route.label, guards, [Spot(holder, 0)], "moderation",
                        lambda _: False, caller=ex.who)
                except GuardUnavailable as exc:
                    return unavailable(exc)
                found = checked.activations
            results.append(_result(guards, found))
        return web.json_response({"id": f"modr-{secrets.token_hex(12)}", "model": ex.model,
                                  "results": results})
