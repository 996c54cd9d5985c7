"""Forward: the route's deployments in order (failover), retries after a backoff, breakers.

Each attempt goes through the deployment's circuit breaker and the gateway's own HTTP/1.1
client (upstream/http1.py); what comes back is handed to Relay. The upstream client's lifetime is
this part's (``open``, ``close``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from aiohttp import web
from opentelemetry.trace import SpanKind

from llm_operator.access.limits import retry_after_header
from llm_operator.gateway.errors import error_response
from llm_operator.gateway.path.answers import AnswerFailed
from llm_operator.gateway.path.calling import Counted, post, refused
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.path.parts.relay import Relay
from llm_operator.gateway.providers import Untranslatable
from llm_operator.gateway.routing.breaker import State
from llm_operator.gateway.routing.routes import (
    Clock,
    Deployment,
    Outbound,
    RouteState,
    RouteTable,
    Sleep,
)
from llm_operator.gateway.telemetry.tracing import RequestTrace, Span
from llm_operator.gateway.upstream.http1 import Response as UpstreamResponse
from llm_operator.gateway.upstream.http1 import UpstreamClient
from llm_operator.gateway.upstream.proxies import ProxySettings

log = logging.getLogger("llm_operator.gateway")

RETRYABLE = frozenset({429, 502, 503, 504, 529})  # 529: Anthropic overloaded
LOST = frozenset({"connect", "connect_timeout"})  # no connection, or it died mid-answer
TIMEOUTS = frozenset({"timeout", "connect_timeout"})
_NO_SPAN: contextlib.nullcontext[None] = contextlib.nullcontext()  # reusable: not traced
Outcome = UpstreamResponse | str | AnswerFailed


def _why(outcome: Outcome) -> str:
    """What a failed attempt's span and the next attempt's retry reason say."""
    if isinstance(outcome, UpstreamResponse):
        return str(outcome.status)
    return outcome.reason if isinstance(outcome, AnswerFailed) else outcome


class Forward:
    """Sends a request to its route's deployments until one answers or it must give up."""

    def __init__(self, table: RouteTable, relay: Relay, proxies: ProxySettings, *,
                 clock: Clock, sleep: Sleep, jitter: Callable[[], float],
                 pick: Callable[[], float]) -> None:
        self.table, self.relay, self.proxies = table, relay, proxies
        self._clock, self._sleep, self._jitter = clock, sleep, jitter
        self._pick = pick  # draws the first deployment of each request, by weight
        self.http: UpstreamClient | None = None

    def open(self) -> None:
        # No cookies are kept: a cookie one client's call earned (a provider's __cf_bm) must
        # not ride on every later client's calls.
        self.http = UpstreamClient(keepalive_seconds=60, proxies=self.proxies)

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()

    def _backoff(self, state: RouteState, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return max(0.0, float(retry_after))
            except ValueError:
                pass
        policy = state.route.retry
        ceiling = min(policy.backoff_max_seconds,
                      policy.backoff_initial_seconds * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + 0.5 * self._jitter())

    async def __call__(self, ex: Exchange) -> web.StreamResponse:
        """Try the route's deployments in order (failover), then again after a backoff.

        A deployment whose circuit is open is skipped; a failure (429, 502-504, connection
        error, timeout) moves on to the next deployment at once, and back to the first after
        the backoff, while ``retry.attempts`` and the request's deadline allow. An upstream
        that fails after it began to answer but before the client received a byte (a plain
        answer cut short, a stream that dies before its first event) counts as a failure
        too. Nothing is retried once the client has received bytes of a stream. With
        ``collect`` the upstream streams a plain request's answer, which is assembled for
        the client.
        """
        state = ex.state
        route, label = state.route, state.route.label
        deadline = ex.started + route.timeouts.request_seconds
        order = state.order(self._pick(), ex.body)
        attempt = position = skipped = 0
        failure: str | None = None  # why the previous attempt failed (its span says)
        while True:
            deployment = order[position % len(order)]
            position += 1
            try:
                sending = ex.outbound(deployment)
            except Untranslatable as exc:
                return error_response(400, f"{exc} (upstream {deployment.label} of "
                                      f"{label!r})", "invalid_request_error",
                                      "unsupported_by_upstream", param=exc.param,
                                      headers={"x-llmop-upstream": deployment.label})
            # A retry re-checks: the upstream may have been marked down meanwhile (a local
            # model process that died as the first attempt went out).
            unavailable = self.table.unavailable_error(state) if attempt else None
            if unavailable is not None:
                return unavailable
            blocked = refused(deployment)
            if blocked is not None:
                state.metrics.upstream_error(blocked)
                skipped += 1
                if skipped < len(order):
                    continue
                answer, ex.unreachable = _blocked(state, order, blocked)
                return answer
            skipped = 0
            attempt += 1
            tried = {"x-llmop-upstream": deployment.label, "x-llmop-attempts": str(attempt),
                     **({"x-llmop-dropped-params": ",".join(sending.dropped)}
                        if sending.dropped else {})}
            outcome = await self._try_one(ex, deployment, sending, deadline, attempt=attempt,
                                          retry_reason=failure, tried=tried)
            if isinstance(outcome, web.StreamResponse):
                return outcome  # answered
            failure = _why(outcome)
            if (go_on := self._next_try(state, order, deployment, attempt=attempt,
                                        position=position, outcome=outcome,
                                        deadline=deadline)) is not None:
                failover, delay = go_on
                if isinstance(outcome, UpstreamResponse):
                    outcome.release()
                (state.metrics.failovers if failover else state.metrics.retries).inc()
                if delay:
                    await self._sleep(delay)
                continue
            if isinstance(outcome, UpstreamResponse):
                try:
                    return await self.relay.plain(ex, outcome, tried, deployment.native)
                except AnswerFailed as failed:
                    state.metrics.upstream_error(failed.reason)
                    outcome = failed
            answer, ex.unreachable = _gave_up(label, outcome, attempt, tried)
            return answer

    async def _try_one(self, ex: Exchange, deployment: Deployment, sending: Outbound,
                       deadline: float, *, attempt: int, retry_reason: str | None,
                       tried: dict[str, str]) -> web.StreamResponse | Outcome:
        """One attempt: the answer relayed to the client, or why it failed.

        A retryable answer (429, 5xx) comes back unrelayed, for the caller to retry or
        pass on.
        """
        state = ex.state
        outcome: Outcome
        trace = ex.trace
        # in the deployment's load until its answer is relayed in full
        span_of = _NO_SPAN if trace is None or not trace.recording else \
            _attempt_span(trace, deployment, attempt, retry_reason)
        with Counted(deployment, self._clock), span_of as span:
            outcome = await self._attempt(deployment, state, sending.url, sending.body,
                                          stream=ex.stream or ex.collect,
                                          deadline=deadline, trace=trace)
            if isinstance(outcome, UpstreamResponse) and outcome.status not in RETRYABLE:
                try:
                    if ex.stream and outcome.status == 200:
                        return await self.relay.stream(ex, outcome, tried, deployment.native)
                    return await self.relay.plain(ex, outcome, tried, deployment.native,
                                                  collect=ex.collect and outcome.status == 200)
                except AnswerFailed as failed:  # the client has nothing yet: go on
                    deployment.breaker.failure()
                    state.metrics.upstream_error(failed.reason)
                    outcome = failed
            RequestTrace.failed(span, _why(outcome))
        return outcome

    def _next_try(self, state: RouteState, order: list[Deployment], deployment: Deployment,
                  *, attempt: int, position: int, outcome: Outcome, deadline: float
                  ) -> tuple[bool, float] | None:
        """(a failover?, the delay before it) when the request may be tried again, else None."""
        route = state.route
        failover = len(order) > 1 and position % len(order) != 0
        retry_after = outcome.headers.get("Retry-After") \
            if isinstance(outcome, UpstreamResponse) else None
        delay = 0.0 if failover else self._backoff(state, attempt, retry_after)
        rate_limited = isinstance(outcome, UpstreamResponse) and outcome.status == 429
        may = (attempt < route.retry.attempts and self._clock() + delay < deadline
               and (len(order) > 1 or deployment.breaker.state is State.CLOSED)
               and (failover or not rate_limited or route.retry.on_rate_limit))
        return (failover, delay) if may else None

    async def _attempt(self, deployment: Deployment, state: RouteState, url: str,
                       payload: bytes, *, stream: bool, deadline: float,
                       trace: RequestTrace | None = None) -> UpstreamResponse | str:
        """One call to one deployment (path/calling.py), its first byte in the trace."""
        assert self.http is not None, "Forward.open() runs when the app starts"
        timeouts = state.route.timeouts
        upstream = await post(self.http, deployment, state, url, payload,
                              connect_timeout=timeouts.connect_seconds,
                              total=None if stream else deadline - self._clock(),
                              read_timeout=timeouts.request_seconds if stream else None,
                              trace=trace)
        if trace is not None and isinstance(upstream, UpstreamResponse):
            trace.event("first byte", **{"http.response.status_code": upstream.status})
        return upstream


@contextlib.contextmanager
def _attempt_span(trace: RequestTrace, deployment: Deployment, attempt: int,
                  retry_reason: str | None) -> Iterator[Span | None]:
    """One attempt's client span, in a request that is recorded."""
    attributes: dict[str, str | int] = {
        "llmop.upstream": deployment.label, "llmop.attempt": attempt,
        "server.address": deployment.url_base}
    if retry_reason is not None:
        attributes["llmop.retry_reason"] = retry_reason
    with trace.span("llmop.upstream", attributes, SpanKind.CLIENT) as span:
        yield span


def _gave_up(label: str, outcome: str | AnswerFailed, attempt: int, tried: dict[str, str]
             ) -> tuple[web.Response, bool]:
    """The error once no attempt is left: why the last one failed.

    With it, whether the replica may be gone (no connection, or it died mid-answer).
    """
    if isinstance(outcome, AnswerFailed):
        reason = outcome.reason
        response = error_response(504 if reason in TIMEOUTS else 502,
                                  f"upstream of {label!r} failed while it answered "
                                  f"({reason}) after {attempt} attempt(s)",
                                  "server_error", f"upstream_{reason}", headers=tried)
        return response, reason in LOST
    log.warning("route %s: upstream %s after %d attempts", label, outcome, attempt)
    if outcome == "credentials":
        return error_response(503, f"the gateway has no credentials for {label!r}; "
                              "its operator must provide the API key", "server_error",
                              "credentials_unavailable", headers=tried), False
    status = 504 if outcome in TIMEOUTS else 502
    response = error_response(status, f"upstream of {label!r} did not answer "
                              f"({outcome}) after {attempt} attempt(s)", "server_error",
                              f"upstream_{outcome}", headers=tried)
    return response, outcome in LOST  # its replica may be gone


def _blocked(state: RouteState, order: list[Deployment], why: str
             ) -> tuple[web.Response, bool]:
    """503 when no upstream may be called now (all full, or their circuits open).

    With it, whether the replicas may be gone: open circuits (a route that holds waits for
    another replica).
    """
    label = state.route.label
    if why == "circuit_open":
        wait = retry_after_header(min(d.breaker.retry_in() for d in order))
        response = error_response(503, f"upstream of {label!r} is failing; the gateway "
                                  f"stops calling it for {wait}s", "server_error",
                                  "circuit_open", headers={"Retry-After": wait})
        return response, True
    limits = ", ".join(f"{d.label}: {d.upstream.max_concurrent}" for d in order)
    wait = retry_after_header(max(1.0, min(d.load.answer_seconds for d in order)))
    return error_response(
        503, f"{label!r} is at capacity: every upstream holds as many requests as it "
        f"takes at once ({limits}); retry after {wait}s", "server_error",
        "model_overloaded", headers={"Retry-After": wait}), False
