"""One call to one deployment: whether it may be called, its credentials, its breaker's verdict.

Forward (a client's request) and RouteJudges (a guard model's check) call deployments the
same way: past a deployment that holds its ``maxConcurrent`` or whose circuit is open, with
the route's credentials, its verdict on the breaker (a 5xx or no answer fails it, anything
else is alive; a caller that went away gives none), its failures counted on the route, and
the call counted in the deployment's load while it lasts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from types import TracebackType

from llm_operator.gateway.routing.routes import Deployment, RouteState
from llm_operator.gateway.telemetry.tracing import RequestTrace
from llm_operator.gateway.upstream.credentials import KeyUnavailable
from llm_operator.gateway.upstream.http1 import Response, UpstreamClient, UpstreamError

log = logging.getLogger("llm_operator.gateway")


def refused(deployment: Deployment) -> str | None:
    """Why ``deployment`` may not be called now, else None.

    ``at_capacity``: it holds as many requests as it takes (``maxConcurrent``);
    ``circuit_open``: its breaker stops calls. None takes the breaker's leave (a half-open
    breaker's one probe): the caller then calls it and a verdict is recorded.
    """
    limit = deployment.upstream.max_concurrent
    if limit is not None and deployment.load.in_flight >= limit:
        return "at_capacity"
    return None if deployment.breaker.allow() else "circuit_open"


class Counted:
    """The deployment's load counts a call while this is entered (least-load picks by it)."""

    __slots__ = ("_clock", "_deployment", "_sent")

    def __init__(self, deployment: Deployment, clock: Callable[[], float]) -> None:
        self._deployment, self._clock, self._sent = deployment, clock, 0.0

    def __enter__(self) -> None:
        deployment = self._deployment
        deployment.load.in_flight += 1
        deployment.calls.in_flight += 1
        self._sent = self._clock()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        deployment = self._deployment
        calls = deployment.calls
        calls.in_flight -= 1
        calls.last_done = now = self._clock()
        load = deployment.load
        load.in_flight -= 1
        load.answered(now - self._sent)


async def post(http: UpstreamClient, deployment: Deployment, state: RouteState, url: str,
               payload: bytes, *, connect_timeout: float, total: float | None,
               read_timeout: float | None = None, trace: RequestTrace | None = None,
               judge_status: bool = True) -> Response | str:
    """POST ``payload`` to a deployment ``refused`` let through; its breaker's verdict.

    The upstream's response (its status judged: a 5xx fails the breaker, a 429 or any
    other is alive), or why there was none: ``credentials`` (the route's key cannot be
    read), or the upstream client's reason (``connect``, ``timeout``...). A cancelled
    call gives back the breaker's leave without a verdict. ``trace`` continues in the
    engine (W3C traceparent). ``judge_status`` False: the caller gives the verdict
    (``judged``) once it has read what it needs, so that an answer cut short fails it.
    """
    try:
        headers = deployment.auth_headers()
    except KeyUnavailable as exc:
        log.error("route %s upstream %s: %s", state.route.label, deployment.label, exc)
        deployment.breaker.release()
        return "credentials"
    if trace is not None:
        trace.inject(headers)
    try:
        upstream = await http.post(url, payload, headers, connect_timeout=connect_timeout,
                                   total=total, read_timeout=read_timeout)
    except asyncio.CancelledError:  # the caller went away: no verdict on the upstream
        deployment.breaker.release()
        raise
    except UpstreamError as exc:
        deployment.breaker.failure()
        state.metrics.upstream_error(exc.reason)
        log.info("route %s upstream %s: %s", state.route.label, deployment.label, exc)
        return exc.reason
    if judge_status:
        judged(deployment, state, upstream.status)
    return upstream


def judged(deployment: Deployment, state: RouteState, status: int) -> None:
    """The breaker's verdict on an answer's status; a 429 or 5xx is counted on the route.

    A 5xx fails the breaker; a 429 or any other status says the upstream is alive.
    """
    if status >= 500:
        deployment.breaker.failure()
    else:
        deployment.breaker.success()  # a 429 too: alive, only busy
    if status == 429 or status >= 500:
        state.metrics.upstream_error(str(status))
