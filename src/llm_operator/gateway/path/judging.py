"""Guard models asked as the gateway asks any model: its upstream client, breakers, load, flow.

A judge or a moderation endpoint is any routed model: its deployments are tried in the
route's order on their OpenAI-compatible API (``/completions``, ``/moderations``; a native
Anthropic or Gemini API has neither), with the route's credentials, a judge greedy and
short. Each call goes the way a client's request does (calling.py): through the request path's
upstream client (its egress proxies and kept-alive connections), past a deployment whose
circuit is open or that holds its ``maxConcurrent``, its verdict recorded on the
deployment's breaker and load. Where the guard model's pool is flow-controlled, the call
waits for a slot under its caller's band and fairness ID (the client whose text it checks):
a client that sends many guarded requests queues for the judge, as for any model, and
cannot crowd out the others.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from llm_operator.gateway.flow.bands import Classified
from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.flow.queue import FREE, FlowRefused, Lease
from llm_operator.gateway.path.calling import Counted, judged, post, refused
from llm_operator.gateway.routing.routes import Clock, Deployment, RouteState, RouteTable
from llm_operator.gateway.upstream.http1 import UpstreamClient, UpstreamError
from llm_operator.guardrails.judges import answer_text, verdict_request
from llm_operator.guardrails.moderation import moderation_request
from llm_operator.guardrails.runner import JudgeFailed

T = TypeVar("T")


def _raw(raw: bytes) -> bytes:
    return raw


class RouteJudges:
    """The gateway's JudgeClient (guardrails/runner.py).

    ``http``: the request path's upstream client, set while the app runs (app.py opens
    it); ``flow``: the gateway's flow control, for a slot of the guard model's pool.
    """

    def __init__(self, table: RouteTable, flow: Flow | None = None,
                 clock: Clock | None = None) -> None:
        self.table, self.flow = table, flow
        self._clock: Clock = clock or time.monotonic
        self.http: UpstreamClient | None = None

    async def complete(self, model: str, prompt: str, timeout: float,
                       caller: object = None) -> str:
        """The judge's answer to ``prompt``; JudgeFailed (why, never the prompt) if none."""
        return await self._ask(model, "judge", "/completions",
                               lambda upstream: verdict_request(upstream, prompt),
                               timeout=timeout, read=answer_text, caller=caller)

    async def moderate(self, model: str, texts: Sequence[str], timeout: float,
                       caller: object = None) -> bytes:
        """The moderation endpoint's answer about ``texts``; JudgeFailed (why) if none."""
        return await self._ask(model, "moderation", "/moderations",
                               lambda upstream: moderation_request(upstream, texts),
                               timeout=timeout, read=_raw, caller=caller)

    async def _ask(self, model: str, role: str, path: str,
                   body: Callable[[str], dict[str, Any]], *, timeout: float,
                   read: Callable[[bytes], T | None], caller: object) -> T:
        """``read`` of the first deployment's 200 answer at ``path`` (None: it has no text).

        ``body``: the request for the deployment's upstream model id; ``caller``: the
        Classified client whose text is checked (None: the call takes no flow slot).
        """
        state = self.table.routes.get(model)
        if state is None:
            raise JudgeFailed(f"the {role} model {model!r} is not served here")
        deployments = state.order(random.random())
        if not deployments:
            raise JudgeFailed(f"the {role} model {model!r} has no replica now")
        if self.http is None:
            raise JudgeFailed("the gateway is not serving (it starts or stops)")
        lease = await self._slot(state, role, model, caller)
        try:
            failures = []
            for deployment in deployments:
                why = await self._one(deployment, state, path, body, timeout=timeout,
                                     read=read)
                if not isinstance(why, str):
                    return why[0]
                failures.append(f"{deployment.label}: {why}")
            raise JudgeFailed("; ".join(failures))
        finally:
            lease.release()

    async def _slot(self, state: RouteState, role: str, model: str, caller: object) -> Lease:
        """A slot of the guard model's pool for ``caller``, or JudgeFailed (flow's refusal)."""
        if self.flow is None or not isinstance(caller, Classified):
            return FREE
        try:
            return await self.flow.acquire(state.route.pool_name, caller)
        except FlowRefused as refused:
            raise JudgeFailed(f"the {role} model {model!r} is busy: {refused.message}"
                              ) from None

    async def _one(self, deployment: Deployment, state: RouteState, path: str,
                   body: Callable[[str], dict[str, Any]], *, timeout: float,
                   read: Callable[[bytes], T | None]) -> tuple[T] | str:
        """One deployment's readable answer (in a 1-tuple), or why it gave none.

        It is called as Forward calls one (path/calling.py): skipped when full or its circuit
        is open, its verdict on the breaker, counted in its load while the call lasts.
        """
        if deployment.native is not None:
            return f"the {deployment.native.name} API has no {path.lstrip('/')} endpoint"
        http = self.http
        if http is None:  # the app stopped while the call waited for its slot
            return "the gateway is stopping"
        blocked = refused(deployment)
        if blocked is not None:
            state.metrics.upstream_error(blocked)
            return blocked
        payload = json.dumps(body(state.route.upstream_model(deployment.upstream)),
                             separators=(",", ":")).encode()
        with Counted(deployment, self._clock):
            answer = await post(http, deployment, state, f"{deployment.url_base}{path}",
                                payload, total=timeout, judge_status=False,
                                connect_timeout=min(state.route.timeouts.connect_seconds,
                                                    timeout))
            if isinstance(answer, str):
                return answer
            try:
                raw = await answer.read()
            except asyncio.CancelledError:  # the guarded request went away: no verdict
                deployment.breaker.release()
                raise
            except UpstreamError as exc:  # it died mid-answer: a failure, whatever its status
                deployment.breaker.failure()
                state.metrics.upstream_error(exc.reason)
                return exc.reason
            judged(deployment, state, answer.status)
        if answer.status != 200:
            return f"HTTP {answer.status}"
        try:
            got = read(raw)
        except (ValueError, LookupError, TypeError) as exc:
            return type(exc).__name__
        return (got,) if got is not None else "the answer has no text"
