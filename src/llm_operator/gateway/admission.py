"""Admitting a request: its body, client key, route, a replica to wait for, rate limits.

What passes is built for each deployment (the client's bytes, or with the upstream's
model id, or translated) and forwarded (forwarding.py).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from llm_operator.access.limits import Reservation, admit, retry_after_header
from llm_operator.batch.runner import OWNER_HEADER, RUN_HEADER
from llm_operator.gateway.classify import BadFairnessId, Classified, classify
from llm_operator.gateway.clients import Client
from llm_operator.gateway.errors import Refusal, error_response
from llm_operator.gateway.flow import FREE, FlowRefused, Lease
from llm_operator.gateway.forwarding import UNREACHABLE, Forwarding
from llm_operator.gateway.inbound.messages import (
    MessagesError,
    to_openai,
)
from llm_operator.gateway.relaying import HeldEnded, HeldStream
from llm_operator.gateway.routes import (
    ANTHROPIC,
    BATCH_RUN,
    CHAT_PATH,
    CLIENT_KEY,
    ROUTE_KEY,
    STREAM_STARTED,
    UNAVAILABLE_RETRY_AFTER,
    Deployment,
    Outbound,
    RouteState,
)
from llm_operator.gateway.tracing import TRACE, RequestTrace

USAGE_OPTION_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


@dataclass(slots=True)
class _Admitted:
    """A request admitted to its route: who, what, where, and the tokens it reserved."""

    client: Client | None
    who: Classified | None
    raw: bytes
    body: dict[str, Any]
    model: str
    state: RouteState
    held: HeldStream | None
    reservation: Reservation


def _asks_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


class Admission(Forwarding):
    """Decides whether and where a request goes, and waits for a replica if it must."""

    async def _proxy(self, request: web.Request, started: float
                     ) -> tuple[web.StreamResponse, RouteState | None]:
        try:
            return await self._admit(request, started), request.get(ROUTE_KEY)
        except Refusal as refused:
            return refused.response, request.get(ROUTE_KEY)
        except HeldEnded as ended:
            return ended.stream, request.get(ROUTE_KEY)

    async def _read_json(self, request: web.Request) -> tuple[bytes, dict[str, Any], str]:
        """The raw body, its JSON and its model; Refusal (400, 413) when unusable."""
        limit = self.config.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise Refusal(self._too_large())
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise Refusal(self._too_large()) from None
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise Refusal(error_response(400, f"request body is not valid JSON: {exc}",
                                         "invalid_request_error", "invalid_json")) from None
        except RecursionError:
            raise Refusal(error_response(400, "request body nests JSON too deeply",
                                         "invalid_request_error", "invalid_json")) from None
        if request.get(ANTHROPIC) and isinstance(body, dict):
            try:
                body = to_openai(body)
            except MessagesError as exc:
                raise Refusal(error_response(400, str(exc), "invalid_request_error")) from None
            raw = json.dumps(body, separators=(",", ":")).encode()
        model = body.get("model") if isinstance(body, dict) else None
        if not isinstance(model, str):
            raise Refusal(error_response(400, "the request needs a string field 'model'",
                                         "invalid_request_error", "missing_model",
                                         param="model"))
        return raw, body, model

    def _resolve(self, model: str, client: Client | None) -> RouteState:
        """The route serving ``model`` for this client; Refusal (403, 404) otherwise."""
        state = self.routes.get(model)
        if state is not None and client is not None and not client.key.may_use(model):
            assert self.gate is not None
            raise Refusal(self.gate.forbidden(client, model))
        if state is None:
            known = ", ".join(sorted(e["id"] for e in self._listed(client))) or "none"
            why = self._absent.get(model)
            message = f"The model {model!r} is not served: {why}" if why else \
                f"The model {model!r} does not exist here"
            raise Refusal(error_response(404, f"{message}; available models: {known}",
                                         "invalid_request_error", "model_not_found",
                                         param="model"))
        return state

    async def _admit(self, request: web.Request, started: float) -> web.StreamResponse:
        trace = request.get(TRACE)  # once: the request's parts are handed it
        if trace is None:
            admitted = await self._admission(request, None)
        else:
            with trace.span("llmop.admission"):
                admitted = await self._admission(request, trace)
        if not isinstance(admitted, _Admitted):
            return admitted
        state, body, held, reservation = admitted.state, admitted.body, admitted.held, \
            admitted.reservation
        stream, hide_usage, collect = _shape(request, state, body)
        outbound = _Outbounds(state, admitted.model, admitted.raw, body, stream=stream,
                              rewrite=hide_usage or collect, path=CHAT_PATH if request.get(
                                  ANTHROPIC) else request.path.removeprefix("/v1"))
        try:
            try:  # a slot of the model's replicas: at once, or after its turn in the queue
                lease = self._slot_now(trace, state, admitted.who)
                if lease is None:  # the pool is full, or the request is traced
                    lease = await self._slot(trace, state, admitted.who)
            except FlowRefused as denied:
                response: web.StreamResponse = _flow_error(denied)
            else:
                try:
                    while True:
                        response = await self._forward(
                            request, state, outbound=outbound, stream=stream,
                            started=started, client=admitted.client,
                            reservation=reservation, hide_usage=hide_usage, held=held,
                            body=body, collect=collect, trace=trace)
                        if not response.get(UNREACHABLE):
                            break
                        replaced = await self._replaced(state, admitted.model, started)
                        if replaced is None:
                            break
                        state = request[ROUTE_KEY] = replaced
                finally:
                    lease.release()
        finally:
            reservation.settle()  # no usage came back (an error, a cancel): give it back
        if held is not None and response is not held and isinstance(response, web.Response):
            return await held.fail(response)  # the headers went out with the keepalives
        return response

    async def _replaced(self, state: RouteState, model: str, started: float
                        ) -> RouteState | None:
        """The route once its replicas changed, within its hold; None: give up.

        Called after no replica could be connected to: a pod killed and not yet out of the
        table. Routes without ``hold`` (providers, `llmop gateway`'s fixed upstreams) give
        up at once.
        """
        hold = state.route.hold
        if hold is None:
            return None
        gone = {d.url_base for d in state.deployments}
        deadline = started + hold.seconds
        label = state.route.label
        async with self.holds.holding(label):  # held, as for a model with no replica
            while (left := deadline - self._clock()) > 0:
                # woken when the table changes; else tried again every keepalive interval
                # (`llmop up` restarts a process at the same address)
                woken = await self.holds.wait(label, min(left, hold.keepalive_seconds))
                current = self.routes.get(model)
                if current is None or current.route.label != label:
                    return None
                if any(d.url_base not in gone for d in current.deployments) or \
                        (current.deployments and not woken):
                    return current
        return None

    async def _admission(self, request: web.Request, trace: RequestTrace | None
                         ) -> _Admitted | web.StreamResponse:
        """Who asks, for what, on which route, within which limits; or the answer now."""
        client = None
        runner = self.batch_runner is not None and request.headers.get(RUN_HEADER)
        if runner:  # the batch runner, acting as a batch's owner
            client = self._batch_client(request, runner)
        if self.gate is not None:  # who is asking, before reading what they ask
            client = request[CLIENT_KEY] = client or self.gate.identify(request)
            if trace is not None:
                trace.note(**{"llmop.client_key": client.key.id})
        who = self._classify(request, client)
        raw, body, model = await self._read_json(request)
        state = request[ROUTE_KEY] = self._resolve(model, client)
        if trace is not None:
            trace.note(**{"gen_ai.request.model": model, "llmop.route": state.route.label})
        unavailable = self._unavailable_error(state, model)
        if unavailable is not None:
            return unavailable
        held: HeldStream | None = None
        if not state.deployments:  # no replica yet: wait for one (scale from zero)
            state, held = await self._hold(request, state, model, client,
                                           stream=body.get("stream") is True)
            request[ROUTE_KEY] = state
        if client is not None:
            assert self.gate is not None
            await self.gate.check_budget(client)
        reservation = Reservation()
        refused = await self._rate_limited(state, client, body, reservation)  # sendable
        if trace is not None:
            trace.note(**{"llmop.rate_limited": refused is not None})
        if refused is not None:
            return refused
        return _Admitted(client, who, raw, body, model, state, held, reservation)

    def _batch_client(self, request: web.Request, token: str) -> Client | None:
        """The owner of a batch the runner sends a request of (its secret checked)."""
        assert self.batch_runner is not None
        if not secrets.compare_digest(token, self.batch_runner.token):
            return None  # not the runner: the request identifies itself as any other
        request[BATCH_RUN] = True
        owner = request.headers.get(OWNER_HEADER, "")
        return self.gate.member(owner) if self.gate is not None else None

    def _slot_now(self, trace: RequestTrace | None, state: RouteState,
                  who: Classified | None) -> Lease | None:
        """A slot without waiting, as most requests get one; None: ``_slot`` must wait."""
        if who is None:  # flow control is off
            return FREE
        pool = state.route.pool_name
        if trace is not None and trace.recording and self.flow.controls(pool):
            return None  # its queue span is _slot's
        return self.flow.at_once(pool, who)

    async def _slot(self, trace: RequestTrace | None, state: RouteState,
                    who: Classified | None) -> Lease:
        """A slot from flow control after its turn, in a queue span when traced."""
        assert who is not None  # _slot_now answered FREE for flow control off
        pool = state.route.pool_name
        if trace is None or not trace.recording or not self.flow.controls(pool):
            return await self.flow.wait(pool, who)
        with trace.span("llmop.queue", {"llmop.band": who.band.name,
                                        "llmop.queue.position": self.flow.queued(pool)}):
            waiting = self._clock()
            lease = await self.flow.acquire(pool, who)
            trace.note(**{"llmop.queue.wait_seconds": self._clock() - waiting})
            return lease

    def _classify(self, request: web.Request, client: Client | None) -> Classified | None:
        """The request's band and fairness ID (None: flow control is off); Refusal (400)."""
        flow = self.config.flow_control
        if not flow.enabled:
            return None
        try:
            return classify(flow, request.headers, client.key if client else None,
                            self.objectives)
        except BadFairnessId as exc:
            raise Refusal(error_response(400, str(exc), "invalid_request_error",
                                         "invalid_fairness_id")) from None

    async def _hold(self, request: web.Request, state: RouteState, model: str,
                    client: Client | None, *, stream: bool
                    ) -> tuple[RouteState, HeldStream | None]:
        """Wait until the model has a replica, in arrival order; Refusal when it will not.

        A stream gets its 200 and SSE comments (``: waiting for model (…)``) every
        ``keepalive_seconds`` meanwhile, so clients and proxies keep the connection; a
        plain request just waits. At the deadline: 503 with Retry-After and the reason.
        """
        hold = state.route.hold
        if hold is None:
            raise Refusal(error_response(503, f"{model!r} has no upstream to call",
                                         "server_error", "model_unavailable",
                                         headers={"Retry-After": UNAVAILABLE_RETRY_AFTER}))
        label = state.route.label
        refusal = self.holds.refusal(label)
        if refusal is not None:
            raise Refusal(error_response(
                503, f"{model!r} is not ready ({hold.reason or 'no replica yet'}) and "
                f"{refusal}; retry shortly", "server_error", "model_unavailable",
                headers={"Retry-After": UNAVAILABLE_RETRY_AFTER}))
        deadline = self._clock() + hold.seconds
        held: HeldStream | None = None
        async with self.holds.holding(label):
            while True:
                current = self.routes.get(model)
                if current is None or current.route.label != label:
                    failure = self._resolve_error(model, client)  # deleted while held
                    if held is None:
                        raise Refusal(failure)
                    raise HeldEnded(await held.fail(failure))
                state, hold = current, current.route.hold or hold
                if state.deployments:
                    return state, held
                left = deadline - self._clock()
                if left <= 0:
                    failure = error_response(
                        503, f"{model!r} did not get a replica within {hold.seconds:g} s: "
                        f"{hold.reason or 'no replica is ready'}", "server_error",
                        "model_unavailable", headers={"Retry-After": UNAVAILABLE_RETRY_AFTER})
                    if held is None:
                        raise Refusal(failure)
                    raise HeldEnded(await held.fail(failure))
                if stream and held is None:
                    held = HeldStream(headers={"Content-Type": "text/event-stream",
                                                "Cache-Control": "no-cache",
                                                "x-llmop-held": "true"})
                    await held.prepare(request)
                    request[STREAM_STARTED] = True
                if held is not None:
                    await held.write(f": waiting for model ({hold.reason or 'no replica'})"
                                     "\n\n".encode())
                await self.holds.wait(label, min(left, hold.keepalive_seconds))

    def _resolve_error(self, model: str, client: Client | None) -> web.Response:
        try:
            self._resolve(model, client)
        except Refusal as refused:
            return refused.response
        return error_response(503, f"{model!r} moved while it waited; retry", "server_error",
                              "model_unavailable", headers={"Retry-After": "1"})

    def _too_large(self) -> web.Response:
        return error_response(413, f"request body exceeds {self.config.max_request_bytes} "
                              "bytes", "invalid_request_error", "request_too_large")

    async def _rate_limited(self, state: RouteState, client: Client | None,
                            body: dict[str, Any], reservation: Reservation
                            ) -> web.Response | None:
        """None when the request may go (its tokens reserved), else the 429 to answer.

        The route's and the client key's allowances are taken together or not at all.
        """
        parties = [state.limits] if client is None else [state.limits, client.limits]
        refused = await self.shared.admit(parties, body, reservation) if self.shared \
            else admit(parties, body, reservation)
        if refused is None:
            return None
        party, wait = refused
        state.metrics.rate_limited.inc()
        if client is not None and party is client.limits:
            client.refused("rate_limit")
        return error_response(
            429, f"rate limit of {party.name} reached; retry after "
            f"{retry_after_header(wait)}s", "rate_limit_error", "rate_limit_exceeded",
            headers={"Retry-After": retry_after_header(wait)})


def _flow_error(refused: FlowRefused) -> web.Response:
    """Flow control's refusal in OpenAI's shape: 429 or 503, with Retry-After."""
    return error_response(refused.status, refused.message,
                          "rate_limit_error" if refused.status == 429 else "server_error",
                          refused.code,
                          headers={"Retry-After": retry_after_header(refused.retry_after)})


def _shape(request: web.Request, state: RouteState, body: dict[str, Any]
           ) -> tuple[bool, bool, bool]:
    """(stream, hide_usage, collect): how the body is asked of upstreams (``body`` edited).

    Usage is what limits and cost are counted from: it is asked for on every stream, and
    the usage event kept from clients that did not ask (hide_usage). A plain answer is
    asked of the upstream as a stream where the route says so (streamUpstream: leaving
    clients then stop the generation) and assembled in relaying (collect).
    """
    stream = body.get("stream") is True
    hide_usage = stream and request.path in USAGE_OPTION_PATHS and not _asks_usage(body)
    if hide_usage:
        options = body.get("stream_options")
        body["stream_options"] = {**(options if isinstance(options, dict) else {}),
                                  "include_usage": True}
    collect = not stream and state.route.stream_upstream \
        and request.path in USAGE_OPTION_PATHS and not request.get(ANTHROPIC)
    if collect:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return stream, hide_usage, collect


class _Outbounds:
    """The request for each deployment: the client's bytes unless its model id differs.

    A native API gets a translation (Untranslatable if there is none); each is built once.
    """

    def __init__(self, state: RouteState, model: str, raw: bytes, body: dict[str, Any], *,
                 stream: bool, rewrite: bool, path: str) -> None:
        self.state, self.model, self.raw, self.body = state, model, raw, body
        self.stream, self.rewrite, self.path = stream, rewrite, path
        self.payloads: dict[str, bytes] = {}
        self.translated: dict[str, Outbound] = {}

    def __call__(self, deployment: Deployment) -> Outbound:
        route, body = self.state.route, self.body
        upstream_model = route.upstream_model(deployment.upstream)
        if deployment.native is not None:
            if deployment.label not in self.translated:
                self.translated[deployment.label] = deployment.translate(
                    body, upstream_model, path=self.path, stream=self.stream)
            return self.translated[deployment.label]
        url = f"{deployment.url_base}{self.path}"
        fields = route.set_fields
        defaults = {k: v for k, v in route.default_fields.items() if k not in body}
        if upstream_model == self.model and not (self.rewrite or fields or defaults):
            return Outbound(url, self.raw)
        if upstream_model not in self.payloads:
            self.payloads[upstream_model] = json.dumps(
                {**defaults, **body, "model": upstream_model, **fields},
                separators=(",", ":")).encode()
        return Outbound(url, self.payloads[upstream_model])
