"""The gateway's HTTP server: OpenAI-compatible endpoints proxied to each route's upstream.

This module wires the aiohttp application: its endpoints, error shape, start and stop. A
request's path is admission.py (may it go, where), forwarding.py (attempts, failover,
retries) and relaying.py (the answer, plain or streamed, and its usage); the routes it
reads are routes.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from llm_operator.access.shared import RedisLedger
from llm_operator.batch.runner import BatchRunner, RunnerSettings
from llm_operator.batch.store import Store
from llm_operator.gateway.admission import Admission
from llm_operator.gateway.batches import BatchApi, open_store, own_address, runner_settings
from llm_operator.gateway.config import GatewayConfig
from llm_operator.gateway.errors import Refusal, error_response
from llm_operator.gateway.http1 import Client as UpstreamClient
from llm_operator.gateway.keys import KeyUnavailable
from llm_operator.gateway.relaying import (
    CLIENT_CLOSED,
    HeldStream,
    Streamed,
    as_anthropic_error,
)
from llm_operator.gateway.routes import ANTHROPIC, CLIENT_KEY, ROUTE_KEY, STREAM_STARTED
from llm_operator.gateway.tracing import TRACE

log = logging.getLogger("llm_operator.gateway")

PROXIED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
MESSAGES_PATH = "/v1/messages"  # Anthropic-shaped clients, translated for any model
ENDPOINTS = ", ".join(f"POST {p}" for p in (*PROXIED_PATHS, MESSAGES_PATH)) + ", GET /v1/models"


@web.middleware
async def openai_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[
        web.StreamResponse]]) -> web.StreamResponse:
    """Every error in the OpenAI shape: unknown paths, wrong methods, the gateway's own bugs."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        return error_response(405, f"{request.method} is not allowed on {request.path}; use "
                              f"{', '.join(sorted(exc.allowed_methods))}",
                              "invalid_request_error", "method_not_allowed",
                              headers={"Allow": ", ".join(sorted(exc.allowed_methods))})
    except web.HTTPNotFound:
        return error_response(404, f"no endpoint {request.method} {request.path} here; the "
                              f"gateway serves {ENDPOINTS}", "invalid_request_error",
                              "unknown_endpoint")
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(exc.status, exc.reason, "invalid_request_error")
    except Exception:
        if request.get(STREAM_STARTED):
            raise  # the answer is under way: aiohttp cuts the connection, the client sees it
        log.exception("internal error serving %s %s", request.method, request.path)
        return error_response(500, "the gateway failed on this request (see its log)",
                              "server_error", "internal_error")


class Gateway(Admission):
    """Routes, limits and metrics behind an aiohttp application."""

    batch_api: BatchApi | None = None  # the Files and Batch APIs, once enabled
    _batch_task: asyncio.Task[None] | None = None
    _batch_autostart = True

    def enable_batches(self, store: Store, base_url: Callable[[], str],
                       settings: RunnerSettings | None = None, *, autostart: bool = True,
                       on_change: Callable[[], None] = lambda: None) -> None:
        """Serve OpenAI's Files and Batch APIs from ``store``.

        Batches run through this gateway at ``base_url()`` (its own address, asked when a
        request is sent). Call before ``app()``: the routes are added there, and the
        runner runs while the app does (``autostart``; else the caller runs it, as the
        router does while it holds the batch Lease).
        """
        counted = self.metrics.batch_requests
        runner = self.batch_runner = BatchRunner(
            store, base_url, served=lambda model: model in self.routes,
            has_replica=self._has_replica, settings=settings,
            counted=lambda outcome: counted.labels(outcome).inc(), on_change=on_change)
        self.batch_api = BatchApi(runner, self._owner)
        self.before_scrape.append(self._export_batches)
        self._batch_autostart = autostart

    def _export_batches(self) -> None:
        if self.batch_runner is not None:
            self.metrics.batches_unfinished.set(self.batch_runner.unfinished)
            self.metrics.batch_requests_left.set(self.batch_runner.left())

    def configured_batches(self, base_url: Callable[[], str], *, autostart: bool = True
                           ) -> None:
        """``enable_batches`` as the config's ``batch`` section says, when it is enabled."""
        if self.config.batch.enabled:
            self.enable_batches(open_store(self.config.batch, self.config.redis), base_url,
                                runner_settings(self.config.batch), autostart=autostart)

    def _has_replica(self, model: str) -> bool:
        state = self.routes.get(model)
        return state is None or bool(state.deployments)  # an unknown model: its error

    def _owner(self, request: web.Request) -> str:
        """Whose files and batches a request sees: its client key's ("" without keys)."""
        return "" if self.gate is None else self.gate.identify(request).key.id

    # --- application -------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.max_request_bytes,
                              middlewares=[openai_errors])
        for path in PROXIED_PATHS:
            # untraced, the handler is the proxy itself: no layer around every request
            app.router.add_post(path, self.proxy if self.traces else self._counted)
        app.router.add_post(MESSAGES_PATH, self.messages)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/ready", self.ready)
        app.router.add_get("/metrics", self.prometheus)
        if self.batch_api is not None:
            self.batch_api.add_routes(app)
        app.on_startup.append(self._open)
        app.on_shutdown.append(self._stop_batches)
        app.on_cleanup.append(self._close)
        return app

    async def _open(self, _: web.Application) -> None:
        if self.batch_runner is not None and self._batch_autostart:
            self._batch_task = asyncio.create_task(self.batch_runner.run())
        # No cookies are kept: a cookie one client's call earned (a provider's __cf_bm) must
        # not ride on every later client's calls.
        self._http = UpstreamClient(keepalive_seconds=60, proxies=self.proxies)
        if (proxied := self.proxies.describe()) is not None:
            log.info("egress proxies: %s", proxied)

    async def _stop_batches(self, _: web.Application) -> None:
        """Before the server waits for its requests: the runner's are given up."""
        if self._batch_task is not None:
            self._batch_task.cancel()  # what it had in flight is sent again after a restart
            with contextlib.suppress(asyncio.CancelledError):
                await self._batch_task

    async def _close(self, _: web.Application) -> None:
        if self._http is not None:
            await self._http.close()
        if isinstance(self.ledger, RedisLedger):
            await self.ledger.close()  # what was spent since the last flush
        if self.shared is not None:
            await self.shared.client.aclose()
        if self.traces is not None:
            await self.traces.close()  # the spans still batched

    # --- small endpoints ---------------------------------------------------------------

    async def models(self, request: web.Request) -> web.Response:
        """Every model, or with client keys the ones the caller's key may use."""
        if self.gate is None:
            return web.Response(body=self._models_body, content_type="application/json")
        try:
            client = self.gate.identify(request)
        except Refusal as refused:
            return refused.response
        return web.json_response({"object": "list", "data": self._listed(client)})

    async def health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def ready(self, _: web.Request) -> web.Response:
        problems = []
        for state in {id(s): s for s in self.routes.values()}.values():
            for deployment in state.deployments:
                if deployment.key is not None:
                    try:
                        deployment.key.get()
                    except KeyUnavailable as exc:
                        where = state.route.label if len(state.deployments) == 1 else \
                            f"{state.route.label} upstream {deployment.label}"
                        problems.append(f"route {where}: {exc}")
        if problems:
            return web.json_response({"status": "not ready", "problems": problems}, status=503)
        ready: dict[str, Any] = {"status": "ready", "routes": len(self.config.routes)}
        if self.gate is not None:
            self.gate.source.current()
            ready["clientKeys"] = len(self.gate.source.keyring.keys)
            if self.gate.source.problem:  # serving with the last good keys
                ready["warnings"] = [self.gate.source.problem]
        return web.json_response(ready)

    async def prometheus(self, _: web.Request) -> web.Response:
        for where, breaker in self._breakers.items():
            self.metrics.circuit.labels(*where).set(int(breaker.state))
        self.metrics.in_flight.clear()
        for base, load in self._loads.items():
            self.metrics.in_flight.labels(base).set(load.in_flight)
        for hook in self.before_scrape:
            hook()
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- the proxy ---------------------------------------------------------------------
    async def messages(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/messages: Anthropic's Messages API in front of any routed model.

        The request is translated to an OpenAI chat completion, the answer (plain or
        streamed) back; the gateway's own errors and the upstream's get Anthropic's shape.
        """
        request[ANTHROPIC] = True
        response = await self.proxy(request)
        if isinstance(response, web.Response) and response.status >= 400:
            return as_anthropic_error(response)
        return response

    async def proxy(self, request: web.Request) -> web.StreamResponse:
        """A proxied request, in its trace's server span when tracing is on."""
        if self.traces is None:
            return await self._counted(request)
        trace = request[TRACE] = self.traces.begin(request.method, request.path,
                                                   request.headers)
        try:
            response = await self._counted(request)
        except asyncio.CancelledError:
            trace.end(None, "the client went away")
            raise
        except BaseException as exc:
            trace.end(None, type(exc).__name__)
            raise
        trace.end(response.status)
        return response

    async def _counted(self, request: web.Request) -> web.StreamResponse:
        started = self._clock()
        try:
            response, state = await self._proxy(request, started)
        except asyncio.CancelledError:  # the client went away before the answer
            routed = request.get(ROUTE_KEY)
            (routed.metrics if routed else self._unrouted).request(
                CLIENT_CLOSED, self._clock() - started)
            if (client := request.get(CLIENT_KEY)) is not None:
                client.request(CLIENT_CLOSED)
            raise
        status = response.outcome if isinstance(response, HeldStream) else \
            None if isinstance(response, Streamed) else response.status
        if status is not None:  # a relayed stream counted itself as it ended
            metrics = state.metrics if state is not None else self._unrouted
            metrics.request(status, self._clock() - started)
            if (client := request.get(CLIENT_KEY)) is not None:
                client.request(status)
        return response


async def serve(config: GatewayConfig, host: str | None = None, port: int | None = None,
                ready: asyncio.Event | None = None) -> None:
    """Run the gateway until cancelled. Client disconnects cancel their upstream request."""
    gateway = Gateway(config)
    gateway.configured_batches(lambda: own_address(
        host or config.listen.host, config.listen.port if port is None else port))
    runner = web.AppRunner(gateway.app(), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host or config.listen.host, config.listen.port
                       if port is None else port)
    await site.start()
    log.info("gateway listening on %s:%s with %d route(s)", host or config.listen.host,
             config.listen.port if port is None else port, len(config.routes))
    if ready is not None:
        ready.set()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run(config: GatewayConfig, host: str | None = None, port: int | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then drain: in-flight requests finish or are cancelled."""

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await serve(config, host, port)

    asyncio.run(main())
