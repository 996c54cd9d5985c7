"""Slot: a place in the model's replicas from flow control, at once or after its turn."""

from __future__ import annotations

from aiohttp import web

from llm_operator.access.limits import retry_after_header
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.flow.queue import FREE, FlowRefused, Lease
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.routes import Clock


class Slot:
    """A Lease to release when the request is done, or flow control's 429 or 503.

    Most requests get theirs at once (``now``, no coroutine); the others wait in their
    band's queue (``wait``), in a queue span when traced. Flow control off: FREE.
    """

    def __init__(self, flow: Flow, clock: Clock) -> None:
        self.flow, self._clock = flow, clock

    def now(self, ex: Exchange) -> Lease | None:
        """A slot without waiting, as most requests get one; None: ``wait`` must."""
        who = ex.who
        if who is None:  # flow control is off
            return FREE
        pool = ex.state.route.pool_name
        trace = ex.trace
        if trace is not None and trace.recording and self.flow.controls(pool):
            return None  # its queue span is wait's
        return self.flow.at_once(pool, who)

    async def wait(self, ex: Exchange) -> Lease | web.Response:
        """A slot from flow control after its turn, or its refusal."""
        who, trace = ex.who, ex.trace
        assert who is not None  # now() answered FREE for flow control off
        pool = ex.state.route.pool_name
        try:
            if trace is None or not trace.recording or not self.flow.controls(pool):
                return await self.flow.wait(pool, who)
            with trace.span("llmop.queue", {"llmop.band": who.band.name,
                                            "llmop.queue.position": self.flow.queued(pool)}):
                waiting = self._clock()
                lease = await self.flow.acquire(pool, who)
                trace.note(**{"llmop.queue.wait_seconds": self._clock() - waiting})
                return lease
        except FlowRefused as refused:
            return error_response(
                refused.status, refused.message,
                "rate_limit_error" if refused.status == 429 else "server_error", refused.code,
                headers={"Retry-After": retry_after_header(refused.retry_after)})
