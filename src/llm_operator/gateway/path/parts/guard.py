"""Guard: the route's guardrails on the request's text, and its output guards set for Relay."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web

from llm_operator.api.guardrails import GuardrailsSpec, GuardSpec
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.flow.bands import Classified
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.path.guarded_stream import GuardedStream, unchecked
from llm_operator.gateway.routing.routes import CHAT_PATH
from llm_operator.gateway.telemetry.tracing import RequestTrace
from llm_operator.guardrails.guards import Activation, Checked, Direction
from llm_operator.guardrails.runner import Guarding, GuardUnavailable, TextTooLong
from llm_operator.guardrails.text import (
    Spot,
    answer_spots,
    asks_unmaskable,
    drop_unmaskable,
    request_spots,
    token_ids,
)

Exempt = Callable[[str], bool]
Decision = web.StreamResponse | None


def blocked(found: Activation) -> web.Response:
    """The 400 for a request or answer a guard blocked: which guard, what it found."""
    what = "the request" if found.direction == "input" else "the model's answer"
    return error_response(
        400, f"guardrail {found.guard!r} blocked {what}: it found "
        f"{', '.join(found.entities)}; leave that out, or ask an administrator about the "
        f"model's guardrails", "invalid_request_error", "guardrail_blocked", param=found.guard)


def unavailable(exc: GuardUnavailable) -> web.Response:
    return error_response(503, f"the model's guardrails cannot run: {exc}", "server_error",
                          "guardrail_unavailable")


def too_long(exc: TextTooLong) -> web.Response:
    """The 413 for a request (or moderation input) with more text than the guards read."""
    return error_response(413, f"the request holds {exc}: send less text, or ask an "
                          "administrator to raise it", "invalid_request_error",
                          "guardrail_text_too_long")


def _never(_: str) -> bool:
    return False


class Guard:
    """Runs the route's input guards; sets ``stream_guard`` or ``answer_guard`` for output.

    Input guards rewrite ``body`` and ``raw`` (mask) or answer 400 (block). Output guards:
    a stream is checked as it comes (``stream_guard``: PII guards on a held-back window,
    then judge and moderation guards on the answer so far at each judge window); a plain
    answer whole, through ``answer_guard``. Every string of the answer is read but
    identifiers and enumerations (``guardrails.text.NOT_TEXT``); ``logprobs`` are refused
    in the request and dropped from answers; what cannot be parsed is not sent (a 502).
    Nothing reaches the client unchecked. A client
    key's ``exemptGuards`` skip those guards; nothing in the request can.
    """

    def __init__(self, guarding: Guarding) -> None:
        self.guarding = guarding

    def __call__(self, ex: Exchange) -> Decision | Awaitable[Decision]:
        guardrails = ex.state.route.guardrails
        if guardrails is None or not (guardrails.input or guardrails.output):
            return None
        return self._check(ex, guardrails)

    async def _check(self, ex: Exchange, guardrails: GuardrailsSpec
                     ) -> web.StreamResponse | None:
        inputs, outputs = guardrails.input or (), guardrails.output or ()
        path = CHAT_PATH if ex.anthropic else ex.request.path
        if outputs and ex.body.get("stream") is True and (
                ex.anthropic or path.endswith("/responses")):
            return error_response(
                400, "this model's output guards stream only chat and text completions "
                f"(checked whole, then sent): ask {ex.request.path} without stream",
                "invalid_request_error", "guardrail_stream_unsupported", param="stream")
        if outputs and (unmaskable := asks_unmaskable(ex.body)) is not None:
            return error_response(
                400, f"this model's output guards cannot mask {unmaskable} (each token of "
                f"the answer again, one by one): ask without logprobs and top_logprobs",
                "invalid_request_error", "guardrail_unmaskable", param=unmaskable)
        if inputs and (ids := token_ids(path, ex.body)) is not None:
            return error_response(
                400, f"this model's input guards read text, and {ids} holds token ids "
                f"(or something else that is not a string): send {ids} as text",
                "invalid_request_error", "guardrail_unreadable", param=ids)
        checks = _Checks(self.guarding, ex.state.route.label, path,
                         ex.client.key.exempt_from if ex.client is not None else _never,
                         ex.trace, guardrails.max_checked_chars, ex.who)
        spots = request_spots(path, ex.body)
        if inputs and spots:
            checked = await checks.run(inputs, spots, "input")
            if isinstance(checked, web.Response):
                return checked
            if checked.masked:
                ex.raw = json.dumps(ex.body, separators=(",", ":")).encode()
        if not outputs:
            return None
        # as the input guards left it (a judge reads it beside the answer): bounded
        checks.asked = "\n\n".join(s.text for s in spots)[-guardrails.max_checked_chars:]
        if ex.body.get("stream") is True:
            ex.stream_guard = _stream_guard(checks, guardrails)
            return None

        async def answer_guard(body: bytes) -> bytes | web.Response:
            return await checks.answer(outputs, body)
        ex.answer_guard = answer_guard
        return None


def _stream_guard(checks: _Checks, guardrails: GuardrailsSpec) -> GuardedStream:
    """A stream's output guards as it comes: PII guards first, then the model guards."""
    outputs = guardrails.output or ()
    pii = [g for g in outputs if g.pii is not None]
    models = [g for g in outputs if g.pii is None]

    async def check_text(window: list[Spot]) -> Checked | web.Response:
        return await checks.run(pii, window, "output")

    async def judge_text(so_far: list[Spot]) -> Checked | web.Response:
        return await checks.run(models, so_far, "output")
    return GuardedStream(check_text if pii else None, guardrails.stream_hold_back_chars,
                         judge=judge_text if models else None,
                         window=guardrails.stream_judge_window_chars,
                         tail=guardrails.max_checked_chars)


@dataclass
class _Checks:
    """One request's guard runs: its route, API path, key's exemptions, and its text."""

    guarding: Guarding
    route: str
    path: str
    exempt: Exempt
    trace: RequestTrace | None  # a span per guard
    max_chars: int  # guardrails.maxCheckedChars
    caller: Classified | None  # whose text: a judge's call queues as this client's
    asked: str = ""  # the request's text, which a judge reads beside the answer

    async def run(self, guards: Sequence[GuardSpec], spots: Sequence[Spot],
                  direction: Direction) -> Checked | web.Response:
        """What the guards found, or the answer instead: the block's 400, or a 503."""
        try:
            checked = await self.guarding.check(self.route, guards, spots, direction,
                                                self.exempt, context=self.asked,
                                                trace=self.trace, max_chars=self.max_chars,
                                                caller=self.caller)
        except GuardUnavailable as exc:
            return unavailable(exc)
        except TextTooLong as exc:
            return too_long(exc) if direction == "input" else unchecked(str(exc))
        return blocked(checked.blocked) if checked.blocked is not None else checked

    async def answer(self, guards: Sequence[GuardSpec], body: bytes) -> bytes | web.Response:
        """A plain answer's body after the output guards, or their refusal."""
        try:
            answer = json.loads(body)
        except (ValueError, RecursionError):
            return unchecked("a body that is not JSON")
        if not isinstance(answer, dict):
            return unchecked("a body that is not a JSON object")
        dropped = drop_unmaskable(answer)
        spots = answer_spots(answer)
        masked = False
        if spots:
            checked = await self.run(guards, spots, "output")
            if isinstance(checked, web.Response):
                return checked
            masked = checked.masked
        return json.dumps(answer, separators=(",", ":")).encode() if masked or dropped \
            else body
