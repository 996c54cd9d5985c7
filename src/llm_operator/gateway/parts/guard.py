"""Guard: the route's guardrails on the request's text, and its output guards set for Relay."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

from llm_operator.api.guardrails import GuardSpec
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.exchange import Exchange
from llm_operator.gateway.routes import CHAT_PATH
from llm_operator.guardrails.guards import Activation, Checked, Direction
from llm_operator.guardrails.runner import Guarding, GuardUnavailable
from llm_operator.guardrails.text import Spot, answer_spots, request_spots

Exempt = Callable[[str], bool]
Decision = web.StreamResponse | None


def blocked(found: Activation) -> web.Response:
    """The 400 for a request or answer a guard blocked: which guard, what it found."""
    what = "the request" if found.direction == "input" else "the model's answer"
    return error_response(
        400, f"guardrail {found.guard!r} blocked {what}: it contains "
        f"{', '.join(found.entities)}; remove that, or ask an administrator about the "
        f"model's guardrails", "invalid_request_error", "guardrail_blocked", param=found.guard)


def unavailable(exc: GuardUnavailable) -> web.Response:
    return error_response(503, f"the model's guardrails cannot run: {exc}", "server_error",
                          "guardrail_unavailable")


def _never(_: str) -> bool:
    return False


class Guard:
    """Runs the route's input guards; sets ``answer_guard`` for its output guards.

    Input guards rewrite ``body`` and ``raw`` (mask) or answer 400 (block). With output
    guards, a stream is asked plain and sent on once checked (Shape sets ``restream``), so
    nothing reaches the client unchecked. A client key's ``exemptGuards`` skip those
    guards; nothing in the request can.
    """

    def __init__(self, guarding: Guarding) -> None:
        self.guarding = guarding

    def __call__(self, ex: Exchange) -> Decision | Awaitable[Decision]:
        guardrails = ex.state.route.guardrails
        if guardrails is None or not (guardrails.input or guardrails.output):
            return None
        return self._check(ex, guardrails.input or (), guardrails.output or ())

    async def _check(self, ex: Exchange, inputs: Sequence[GuardSpec],
                     outputs: Sequence[GuardSpec]) -> web.StreamResponse | None:
        exempt = ex.client.key.exempt_from if ex.client is not None else _never
        path = CHAT_PATH if ex.anthropic else ex.request.path
        route = ex.state.route.label
        if outputs:
            if ex.body.get("stream") is True and (ex.anthropic or path.endswith("/responses")):
                return error_response(
                    400, "this model's output guards stream only chat and text completions "
                    f"(checked whole, then sent): ask {ex.request.path} without stream",
                    "invalid_request_error", "guardrail_stream_unsupported", param="stream")

            async def answer_guard(body: bytes) -> bytes | web.Response:
                return await self._answer(route, path, outputs, exempt, body)
            ex.answer_guard = answer_guard
        spots = request_spots(path, ex.body) if inputs else []
        if not spots:
            return None
        checked = await self._run(route, inputs, spots, "input", exempt)
        if isinstance(checked, web.Response):
            return checked
        if checked.masked:
            ex.raw = json.dumps(ex.body, separators=(",", ":")).encode()
        if ex.trace is not None and checked.activations:
            ex.trace.note(**{"llmop.guardrails.input": ",".join(
                f"{a.guard}:{a.action}" for a in checked.activations)})
        return None

    async def _answer(self, route: str, path: str, guards: Sequence[GuardSpec],
                      exempt: Exempt, body: bytes) -> bytes | web.Response:
        """A plain answer's body after the output guards, or their refusal."""
        try:
            answer = json.loads(body)
        except ValueError:
            answer = None
        spots = answer_spots(path, answer) if isinstance(answer, dict) else []
        if not spots:
            return body
        checked = await self._run(route, guards, spots, "output", exempt)
        if isinstance(checked, web.Response):
            return checked
        return json.dumps(answer, separators=(",", ":")).encode() if checked.masked else body

    async def _run(self, route: str, guards: Sequence[GuardSpec], spots: Sequence[Spot],
                   direction: Direction, exempt: Exempt) -> Checked | web.Response:
        """What the guards found, or the answer instead: the block's 400, or a 503."""
        try:
            checked = await self.guarding.check(route, guards, spots, direction, exempt)
        except GuardUnavailable as exc:
            return unavailable(exc)
        return blocked(checked.blocked) if checked.blocked is not None else checked
