"""The request path: the gateway's parts run in order around one Exchange, counted, traced.

app.py chooses the parts; this runs them. Admission's parts each answer now or let the
request go on; then Shape, a Slot from flow control, and Forward (with Reroute when no
replica could be reached), after Wake where engines take turns on one accelerator.
Whatever answers, the request is counted once, its unused
tokens given back, and an answer to a held stream written into it as an error event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol, runtime_checkable

from aiohttp import web

from llm_operator.gateway.errors import unexpected
from llm_operator.gateway.inbound.incoming import Incoming
from llm_operator.gateway.path.answers import CLIENT_CLOSED, HeldStream
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.path.parts.forward import Forward
from llm_operator.gateway.path.parts.hold import Reroute
from llm_operator.gateway.path.parts.shape import Shape
from llm_operator.gateway.path.parts.slot import Slot
from llm_operator.gateway.path.parts.wake import Wake
from llm_operator.gateway.routing.routes import Clock, RouteTable
from llm_operator.gateway.telemetry.tracing import RequestTrace, Traces
from llm_operator.gateway.upstream.http1 import UpstreamClient


@runtime_checkable
class Lifecycle(Protocol):
    """A part holding something while the app runs (a client): the path opens, closes it."""

    def open(self) -> None: ...

    async def close(self) -> None: ...


# A part of admission: None (go on), the answer, or an awaitable of either when it must wait
# (a part answers at once where it can: most requests need no coroutine of it)
Decision = web.StreamResponse | None
Check = Callable[[Exchange], Decision | Awaitable[Decision]]


class RequestPath:
    """One request through ``checks`` (in the admission span), then Shape, Slot, Forward."""

    def __init__(self, table: RouteTable, traces: Traces | None, clock: Clock, *,
                 checks: Sequence[Check], shape: Shape, slot: Slot, wake: Wake,
                 forward: Forward, reroute: Reroute) -> None:
        self.table, self.traces, self._clock = table, traces, clock
        self.checks = tuple(checks)
        self.shape, self.slot, self.wake = shape, slot, wake
        self.forward, self.reroute = forward, reroute

    def _with_lifecycle(self) -> list[Lifecycle]:
        parts: list[object] = [*self.checks, self.shape, self.slot, self.wake, self.forward,
                               self.reroute]
        return [part for part in parts if isinstance(part, Lifecycle)]

    def open(self) -> None:
        """Open what the parts hold while the app runs (their clients): its startup."""
        for part in self._with_lifecycle():
            part.open()

    async def close(self) -> None:
        """Close it again: the app's cleanup."""
        for part in self._with_lifecycle():
            await part.close()

    @property
    def upstream_client(self) -> UpstreamClient | None:
        """The client every upstream call goes through while the app runs (Forward's)."""
        return self.forward.http

    async def handle(self, request: Incoming, *, anthropic: bool = False
                     ) -> web.StreamResponse:
        """The answer to a proxied request (a handler of either server); its own bugs: 500."""
        traces = self.traces
        trace = None if traces is None else traces.begin(request.method, request.path,
                                                          request.headers)
        ex = Exchange(request, self._clock(), trace, anthropic)
        try:
            if trace is None:
                return await self._counted(ex)
            return await self._traced(ex, trace)
        except Exception as exc:  # every error gets an answer
            return unexpected(request, exc, streaming=ex.headers_sent)

    async def _traced(self, ex: Exchange, trace: RequestTrace) -> web.StreamResponse:
        try:
            response = await self._counted(ex)
        except asyncio.CancelledError:
            trace.end(None, "the client went away")
            raise
        except BaseException as exc:
            trace.end(None, type(exc).__name__)
            raise
        trace.end(response.status)
        return response

    async def _counted(self, ex: Exchange) -> web.StreamResponse:
        """The answer, counted by status in the route's (or no route's) and key's metrics.

        A relayed stream counts itself as it ends. Tokens reserved and not used are given
        back; an answer to a held stream is written into it as its error event.
        """
        try:
            try:
                answer = await self._admit(ex) if ex.trace is not None else \
                    await self._checked(ex)
                if answer is None:
                    answer = await self._dispatch(ex)
            finally:  # no usage came back (admission answered: a guard, no replica; an
                ex.reservation.settle()  # error, a cancel): the reserved tokens go back
            held = ex.held
            if held is not None and answer is not held and isinstance(answer, web.Response):
                answer = await held.fail(answer)  # the headers went out with the keepalives
        except asyncio.CancelledError:  # the client went away before the answer
            if not ex.counted_elsewhere:  # a stream under way counts itself as it ends
                self._count(ex, CLIENT_CLOSED)
            raise
        status = answer.outcome if isinstance(answer, HeldStream) else \
            None if ex.counted_elsewhere else answer.status
        if status is not None:
            self._count(ex, status)
        return answer

    def _count(self, ex: Exchange, status: int) -> None:
        (ex.state.metrics if ex.routed else self.table.unrouted).request(
            status, self._clock() - ex.started)
        if ex.client is not None:
            ex.client.request(status)

    async def _admit(self, ex: Exchange) -> Decision:
        """The checks, in the request's ``llmop.admission`` span."""
        assert ex.trace is not None
        with ex.trace.span("llmop.admission"):
            return await self._checked(ex)

    async def _checked(self, ex: Exchange) -> Decision:
        return await first_answer(self.checks, ex)

    async def _dispatch(self, ex: Exchange) -> web.StreamResponse:
        self.shape(ex)
        lease = self.slot.now(ex)
        if lease is None:  # the pool is full, or the request is traced
            granted = await self.slot.wait(ex)
            if isinstance(granted, web.Response):
                return granted
            lease = granted
        try:
            awake = self.wake.now(ex)
            if awake is None:  # its engine takes turns on one accelerator and is asleep
                woken = await self.wake.wait(ex)
                if isinstance(woken, web.Response):
                    return woken
                awake = woken
            try:
                while True:
                    ex.unreachable = False
                    response = await self.forward(ex)
                    if not ex.unreachable:
                        return response
                    replaced = await self.reroute(ex)
                    if replaced is None:
                        return response
                    ex.route(replaced)
            finally:
                awake.release()
        finally:
            lease.release()


async def first_answer(checks: Sequence[Check], ex: Exchange) -> Decision:
    """The first check's answer, or None: every check let the request go on."""
    for check in checks:
        answer = check(ex)
        if answer is None:
            continue
        if not isinstance(answer, web.StreamResponse):  # it must wait: its coroutine
            answer = await answer
            if answer is None:
                continue
        return answer
    return None
