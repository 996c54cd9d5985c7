"""ToOwner: a flow-controlled model's request passed whole to the router replica owning it.

gateway/routing/owners.py says which replica owns a model's pool. Here, after Resolve has found
the request's model, a request landing on another replica is sent on as it came (method,
path, headers, body) to the owner, whose own parts then do everything (guardrails, holds,
limits, flow control, forwarding), and its answer comes back as it goes, a stream chunk by
chunk. Only requests to flow-controlled pools move: a model whose slots are unknown is
served where the request landed. An owner that cannot be reached leaves the request here,
and the next ones for ``DOWN_SECONDS`` (counted, logged). The answer is counted by the
owner, not again here.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable

import aiohttp
from aiohttp import hdrs, web

from llm_operator.connectors import tcp_connector
from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.inbound.incoming import prepare
from llm_operator.gateway.path.exchange import Exchange
from llm_operator.gateway.routing.owners import PEER_HEADER, Owners
from llm_operator.gateway.routing.routes import Clock
from llm_operator.gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("llm_operator.gateway")

# not passed on either way: the connection's own (RFC 9110 7.6.1), and what aiohttp sets
HOP_BY_HOP = frozenset(h.lower() for h in (
    hdrs.CONNECTION, hdrs.KEEP_ALIVE, hdrs.PROXY_AUTHENTICATE, hdrs.PROXY_AUTHORIZATION,
    hdrs.TE, hdrs.TRAILER, hdrs.TRANSFER_ENCODING, hdrs.UPGRADE, hdrs.HOST,
    hdrs.CONTENT_LENGTH))


DOWN_SECONDS = 5.0  # an owner that could not be reached is not tried for this long


class ToOwner:
    """Answers with the owner's answer, or None: this replica serves the request."""

    def __init__(self, owners: Owners, flow: Flow, metrics: GatewayMetrics, *,
                 clock: Clock, connect_seconds: float = 2.0) -> None:
        self.owners, self.flow, self.metrics, self._clock = owners, flow, metrics, clock
        self.connect_seconds = connect_seconds
        self.http: aiohttp.ClientSession | None = None
        # owners that could not be reached: not tried again until then (a pod gone without
        # a word costs each request the connect timeout until its EndpointSlice says so)
        self._down: dict[str, float] = {}

    def open(self) -> None:
        self.http = aiohttp.ClientSession(
            connector=tcp_connector(limit=0), auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_seconds))

    async def close(self) -> None:
        if self.http is not None:
            await self.http.close()

    def __call__(self, ex: Exchange) -> Awaitable[web.StreamResponse | None] | None:
        if ex.batch_run:  # the Batch API's runner here: its secret stays in this process
            return None  # (its band waits for quiet engines, seen in their looks)
        pool, request = ex.state.route.pool_name, ex.request
        if not self.flow.controls(pool):
            return None
        url = self.owners.passes_to(pool, request.remote, request.headers.get(PEER_HEADER))
        if url is None:
            return None
        if url in self._down:
            if self._clock() < self._down[url]:
                self.metrics.peer_requests.labels(ex.state.route.label, "unreachable").inc()
                return None
            del self._down[url]  # try it again
        return self._pass_on(ex, url)

    async def _pass_on(self, ex: Exchange, url: str) -> web.StreamResponse | None:
        request, http = ex.request, self.http
        assert http is not None, "ToOwner.open() runs when the app starts"
        label = ex.state.route.label
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        passed = request.headers.get(PEER_HEADER)
        headers[PEER_HEADER] = self.owners.me if passed is None else \
            f"{passed},{self.owners.me}"
        if ex.trace is not None:  # the owner's spans continue this replica's trace
            ex.trace.inject(headers)
        try:
            upstream = await http.request(request.method, url + request.path_qs,
                                          data=await request.read(), headers=headers,
                                          allow_redirects=False)
        except (TimeoutError, aiohttp.ClientConnectionError) as exc:
            self.metrics.peer_requests.labels(label, "unreachable").inc()
            self._down[url] = self._clock() + DOWN_SECONDS
            log.warning("router replica %s, which holds %r's queue, could not be reached "
                        "(%s); requests for the models it holds are served where they land "
                        "for %g s, then it is tried again", url, label, type(exc).__name__,
                        DOWN_SECONDS)
            return None
        self.metrics.peer_requests.labels(label, "passed").inc()
        async with upstream:
            answer = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            ex.counted_elsewhere = True  # on the owner
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    answer.headers.add(name, value)
            length = upstream.headers.get(hdrs.CONTENT_LENGTH)
            if length is not None:  # the bytes as they came (auto_decompress off)
                answer.content_length = int(length)
            await prepare(answer, request)
            try:
                async for chunk in upstream.content.iter_any():
                    await answer.write(chunk)
            except aiohttp.ClientError as exc:  # the owner went away mid-answer
                self.metrics.peer_requests.labels(label, "cut").inc()
                log.warning("router replica %s stopped mid-answer for %r: %s", url, label,
                            type(exc).__name__)
                if upstream.content_type == "text/event-stream":
                    await answer.write(_error_event())
                elif request.transport is not None:  # not to be taken as a whole body
                    request.transport.close()
                    return answer
            await answer.write_eof()
        return answer


def _error_event() -> bytes:
    error = {"message": "the router replica holding this model's queue went away while "
             "it answered; retry", "type": "server_error", "code": "router_replica_lost"}
    return f"data: {json.dumps({'error': error})}\n\n".encode()
