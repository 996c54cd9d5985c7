"""Hold and Reroute: a request waits for a replica (from zero, or after one vanished).

Hold: a request for a model with no replica waits for one (scale from zero), in order.
Reroute: a request whose replicas could not be reached waits, within the route's hold, for
the table to show others (a killed pod not yet out of it).
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

from aiohttp import web

from llm_operator.gateway.errors import error_response
from llm_operator.gateway.inbound.incoming import prepare
from llm_operator.gateway.path.answers import HeldStream
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.path.parts.resolve import Resolve
from llm_operator.gateway.routing.holding import Holds
from llm_operator.gateway.routing.routes import (
    UNAVAILABLE_RETRY_AFTER,
    Clock,
    RouteState,
    RouteTable,
)

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
               "x-llmop-held": "true"}


class Hold:
    """Waits while the route has no replica; sets ``state`` (and ``held``) once it has.

    A stream gets its 200 and SSE comments (``: waiting for model (…)``) every
    ``keepalive_seconds`` meanwhile, so clients and proxies keep the connection; a plain
    request just waits. At the deadline, or when the waiting room is full: 503 with
    Retry-After and the reason (in a held stream, as its error event: the path's end
    writes any answer there). A route without ``hold`` answers 503 at once.
    """

    def __init__(self, table: RouteTable, holds: Holds, resolve: Resolve, clock: Clock
                 ) -> None:
        self.table, self.holds, self.resolve, self._clock = table, holds, resolve, clock

    def __call__(self, ex: Exchange) -> Coroutine[Any, Any, web.StreamResponse | None] | None:
        """None at once while the route has a replica; else the wait's coroutine."""
        return None if ex.state.deployments else self._wait(ex)

    async def _wait(self, ex: Exchange) -> web.StreamResponse | None:
        model, state = ex.model, ex.state
        hold = state.route.hold
        if hold is None:
            return error_response(503, f"{model!r} has no upstream to call", "server_error",
                                  "model_unavailable",
                                  headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
        label = state.route.label
        refusal = self.holds.refusal(label)
        if refusal is not None:
            return error_response(
                503, f"{model!r} is not ready ({hold.reason or 'no replica yet'}) and "
                f"{refusal}; retry shortly", "server_error", "model_unavailable",
                headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
        deadline = self._clock() + hold.seconds
        stream = ex.body.get("stream") is True
        async with self.holds.holding(label):
            while True:
                current = self.table.routes.get(model)
                if current is None or current.route.label != label:
                    return self._moved(ex)  # deleted while held
                state, hold = current, current.route.hold or hold
                if state.deployments:
                    ex.route(state)
                    return None
                left = deadline - self._clock()
                if left <= 0:
                    return error_response(
                        503, f"{model!r} did not get a replica within {hold.seconds:g} s: "
                        f"{hold.reason or 'no replica is ready'}", "server_error",
                        "model_unavailable", headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
                if stream and ex.held is None:
                    ex.held = HeldStream(headers=SSE_HEADERS)
                    await prepare(ex.held, ex.request)
                    ex.headers_sent = True
                if ex.held is not None:
                    await ex.held.write(f": waiting for model ({hold.reason or 'no replica'})"
                                        "\n\n".encode())
                await self.holds.wait(label, min(left, hold.keepalive_seconds))

    def _moved(self, ex: Exchange) -> web.Response:
        found = self.resolve.find(ex.model, ex.client)
        if isinstance(found, web.Response):
            return found
        return error_response(503, f"{ex.model!r} moved while it waited; retry",
                              "server_error", "model_unavailable", headers={"Retry-After": "1"})


class Reroute:
    """The route once its replicas changed, within its hold; None: give up.

    Asked after no replica could be connected to. Routes without ``hold`` (providers,
    `llmop gateway`'s fixed upstreams) give up at once.
    """

    def __init__(self, table: RouteTable, holds: Holds, clock: Clock) -> None:
        self.table, self.holds, self._clock = table, holds, clock

    async def __call__(self, ex: Exchange) -> RouteState | None:
        state = ex.state
        hold = state.route.hold
        if hold is None:
            return None
        gone = {d.url_base for d in state.deployments}
        deadline = ex.started + hold.seconds
        label = state.route.label
        async with self.holds.holding(label):  # held, as for a model with no replica
            while (left := deadline - self._clock()) > 0:
                # woken when the table changes; else tried again every keepalive interval
                # (`llmop up` restarts a process at the same address)
                woken = await self.holds.wait(label, min(left, hold.keepalive_seconds))
                current = self.table.routes.get(ex.model)
                if current is None or current.route.label != label:
                    return None
                if any(d.url_base not in gone for d in current.deployments) or \
                        (current.deployments and not woken):
                    return current
        return None
