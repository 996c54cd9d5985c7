"""`llmop up`: llama.cpp processes, one gateway and the MCP server over a directory of YAML."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from pydantic import ValidationError

from llm_operator.api.kv_cache import mib_quantity
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.console.pages import Console
from llm_operator.gateway.app import Gateway
from llm_operator.gateway.server.http import served
from llm_operator.gateway.settings.config import (
    Batches,
    CircuitBreaker,
    ConfigError,
    GatewayConfig,
    Retry,
    Route,
    Upstream,
)
from llm_operator.local.console_models import LocalModels, where_of
from llm_operator.local.entries import Entry, Use, read_models, runtime_key
from llm_operator.local.listening import StartError, free_port, listen
from llm_operator.local.machine import detect
from llm_operator.local.options import LOCAL_FLOW_CONTROL, Options
from llm_operator.local.phases import LOADING_PHASES, SERVING, UNSETTLED, statuses
from llm_operator.local.placement import (
    LOOPBACK,
    Decision,
    LocalServe,
    NotServed,
    RemoteProxy,
    arrange,
)
from llm_operator.local.pools import Pools, pooled, sleep_group
from llm_operator.local.preparing import Prepared, prepare
from llm_operator.local.process import Supervised
from llm_operator.local.register import Registrar, registered
from llm_operator.mcp_server.run import service
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.mcp_server.sources import DirectoryCache
from llm_operator.profiles.kv_tier import host_tier_mib
from llm_operator.registry.catalog import is_base_model
from llm_operator.router.routes import Options as RouteOptions
from llm_operator.router.routes import Serving, Table, build

log = logging.getLogger("llm_operator.local")


# After Ctrl-C or SIGTERM: what the gateway and MCP server still serve gets this long before
# it is cancelled (a laptop's user who stops the stack wants it stopped)
UP_DRAIN_SECONDS = 5


class _Embedded(uvicorn.Server):
    """A uvicorn server that leaves SIGINT and SIGTERM to `llmop up` (which stops it)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Runtime:
    """Serve a directory of LLMModel YAML on this machine until cancelled."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.machine = options.machine or detect()
        self.entries: dict[str, Entry] = {}
        self.pools = Pools(options.state, options.timing, self._prepare, self._refresh,
                           self._engine_env)
        self.problems: list[str] = []
        self.gateway = Gateway(GatewayConfig(
            flow_control=LOCAL_FLOW_CONTROL,
            batch=Batches(enabled=True, path=str(options.state.batches))))
        self._held: dict[str, str | None] = {}  # served model -> why its requests wait
        self.table = Table()
        self._route_options = RouteOptions(
            hold_seconds=options.hold_seconds,
            # quick retries: a kept-alive connection the server closed as the request went
            # out, or a process that just died (the retry then answers 503
            # model_unavailable)
            retry=Retry(attempts=3, backoff_initial_seconds=0.05, on_rate_limit=False),
            # short: a restarted process is used at once
            circuit_breaker=CircuitBreaker(failure_threshold=5, open_seconds=1),
            # every local model is a llama-server (Ollama ones too): plain answers are
            # streamed from it, so a client that leaves frees its slot
            stream_all=True)
        self.gateway_url = ""
        self.console_url = ""
        self.mcp_url = ""
        # the web console, on the gateway's port: loopback only, no login
        self.console = Console(LocalModels(lambda: self.entries, lambda: self.table.labels),
                               self.gateway.metrics.registry,
                               gateway_url=lambda: self.gateway_url.removesuffix("/v1"),
                               where=f"llmop up: {options.directory}",
                               batches=self.gateway.batches_of,
                               slots=self.gateway.route_slots)
        self.version = 0
        self._changed = asyncio.Condition()
        self._dirty = asyncio.Event()
        self._cache = DirectoryCache(options.directory)
        self._scanned = False
        self._started = time.time()
        self.registrar: Registrar | None = None

    # --- observing ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything `llmop status` shows: endpoints, one row per model, problems."""
        rows = []
        for name, entry in sorted(self.entries.items()):  # rows keep their place
            phase, detail, restarts = entry.current()
            decision = entry.decision
            where = where_of(entry)
            exposure = entry.model.spec.mcp_exposure
            rows.append({
                "name": name, "modelId": entry.model.spec.model_id, "phase": phase,
                "detail": detail, "restarts": restarts, "where": where,
                "file": str(entry.file), "progress": entry.progress,
                "tool": exposure.tool_name if exposure.enabled else None,
                "baseModel": is_base_model(entry.model),
                "pid": entry.supervised.pid if entry.supervised else
                entry.pool.supervised.pid if entry.pool and entry.pool.supervised else None,
                "load": self._load(entry),
                # the host KV tier its llama-server keeps (--cache-ram)
                "hostKvCache": mib_quantity(host_tier_mib(entry.model.spec, llama_server=True))
                if isinstance(decision, LocalServe) else None,
                "modelFile": entry.model_file.model_dump(by_alias=True, exclude_none=True)
                if entry.model_file else None,
            })
        return {"pid": os.getpid(), "startedAt": self._started,
                "directory": str(self.options.directory), "gateway": self.gateway_url,
                "console": self.console_url,
                "mcp": self.mcp_url, "logs": str(self.options.state.logs),
                "settled": self._scanned and all(r["phase"] not in UNSETTLED for r in rows),
                "models": rows, "problems": list(self.problems),
                "batches": None if self.gateway.batch_runner is None
                else self.gateway.batch_runner.summary(),
                "registered": None if self.registrar is None else {
                    "namespace": self.registrar.registration.namespace,
                    "lease": self.registrar.registration.machine,
                    "models": sorted(self.registrar.published),
                    "problems": dict(self.registrar.problems)}}

    async def until(self, check: Callable[[dict[str, Any]], bool], timeout: float
                    ) -> dict[str, Any]:
        """Wait until ``check(snapshot)`` holds; TimeoutError with the last snapshot if not."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                while not check(snap := self.snapshot()):
                    await self._changed.wait()
                return snap

    def _touch(self) -> None:
        self.version += 1
        self._dirty.set()

    # --- running --------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until cancelled, then stop every process and remove the state file."""
        options = self.options
        if not options.directory.is_dir():
            raise StartError(f"{options.directory} is not a directory of LLMModel YAML files")
        holder = options.state.read()
        if holder is not None and holder["pid"] != os.getpid():
            raise StartError(f"llmop up is already running (pid {holder['pid']}) with state in "
                             f"{options.state.root}: run `llmop down` first, or pass another "
                             "--state-dir")
        gateway_sock = listen(options.gateway_port, "gateway", "--port", options.gateway_host)
        mcp_sock = listen(options.mcp_port, "MCP server", "--mcp-port")
        self.gateway_url = f"http://{LOOPBACK}:{gateway_sock.getsockname()[1]}/v1"
        self.console_url = f"http://{LOOPBACK}:{gateway_sock.getsockname()[1]}/ui/"
        self.mcp_url = f"http://{LOOPBACK}:{mcp_sock.getsockname()[1]}/mcp"
        options.state.logs.mkdir(parents=True, exist_ok=True)
        options.state.write_statuses({})
        # the Batch API: its runner sends each request to this gateway's own address
        self.gateway.serve_batches(lambda: self.gateway_url.removesuffix("/v1"),
                                   autostart=False, on_change=self._touch)
        try:
            async with self._gateway(gateway_sock), self._mcp(mcp_sock), \
                    self._registered(gateway_sock.getsockname()[1]):
                writer = asyncio.create_task(self._write_state())
                try:
                    await self.rescan()
                    self.gateway.start_batches()  # its models routed: a resumed batch finds them
                    while True:
                        await asyncio.sleep(options.scan_seconds)
                        await self.rescan()
                finally:
                    await self._stop_all()
                    writer.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await writer
        finally:
            gateway_sock.close()
            mcp_sock.close()
            options.state.clear()

    @contextlib.asynccontextmanager
    async def _gateway(self, sock: socket.socket) -> AsyncIterator[None]:
        async with served(self.gateway.app(self.console.add_routes),
                          UP_DRAIN_SECONDS) as listen:
            await listen(sock=sock)
            log.info("gateway on %s, console on %s", self.gateway_url, self.console_url)
            try:
                yield
            finally:
                await self.console.close()

    def serving(self) -> list[LLMModel]:
        """The local models that serve now (what --register publishes): pool members too."""
        return [e.model for e in self.entries.values()
                if isinstance(e.decision, LocalServe) and e.current()[0] in SERVING]

    @contextlib.asynccontextmanager
    async def _registered(self, gateway_port: int) -> AsyncIterator[None]:
        """With --register: publish, heartbeat and, on the way out, withdraw."""
        if self.options.register is None:
            yield
            return
        # `llmop status` shows what is published: a change touches the state
        async with registered(self.options.register, gateway_port, self.serving,
                              self._touch) as self.registrar:
            yield

    @contextlib.asynccontextmanager
    async def _mcp(self, sock: socket.socket) -> AsyncIterator[None]:
        port = sock.getsockname()[1]
        settings = McpSettings(host=LOOPBACK, port=port, drain_seconds=UP_DRAIN_SECONDS)
        async with service(settings, files=self.options.directory,
                           status_file=self.options.state.status_file) as svc:
            server = _Embedded(svc.uvicorn_server(log_level="warning").config)
            task = asyncio.create_task(server.serve(sockets=[sock]))
            log.info("MCP server on %s", self.mcp_url)
            try:
                yield
            finally:
                server.should_exit = True
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait_for(task, UP_DRAIN_SECONDS + 5)

    async def _write_state(self) -> None:
        """Write the state and status files after changes, and wake waiters."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            snap = self.snapshot()
            self.options.state.write(snap)
            self.options.state.write_statuses(statuses(snap, self.gateway_url))
            async with self._changed:
                self._changed.notify_all()
            await asyncio.sleep(0.05)  # coalesce bursts of progress updates

    # --- reconciling the directory ---------------------------------------------------------

    async def rescan(self) -> None:
        """Start, stop or restart models to match the directory's files."""
        changed = await asyncio.to_thread(self._cache.refresh)
        if not changed and self._scanned:
            return
        models, problems, invalid = read_models(self._cache)
        # An edit the schema refuses keeps the running version (bad input loses nothing);
        # removing the file or the document is what stops it.
        valid = {m.name for m, _ in models}
        for name, (path, line) in invalid.items():
            running = self.entries.get(name)
            if running is not None and running.file == path and name not in valid:
                models.append((running.model, path))
                problems = [f"{p}; the running version is kept" if p == line else p
                            for p in problems]
        # What runs keeps running: a new file that clashes with it is the problem.
        models.sort(key=lambda m: not self._runs(m[0].name, m[1]))
        arrangement = arrange([m for m, _ in models], self.machine, self.options.env.keys())
        wanted: dict[str, tuple[Decision, Path]] = {}
        for decision, (_, path) in zip(arrangement.decisions, models, strict=True):
            if isinstance(decision, NotServed) and decision.kind == "clash":
                problems.append(f"{path}: {decision.reason}")
            else:
                wanted[decision.model.name] = (decision, path)
        problems.sort()
        for line in problems:
            if line not in self.problems:
                log.warning("skipped %s", line)
        self.problems = problems
        for name in [n for n in self.entries if n not in wanted]:
            await self._remove(name)
        for name, (decision, file) in wanted.items():
            key = runtime_key(decision, file)
            entry = self.entries.get(name)
            if entry is not None and entry.key == key and entry.file == file:
                entry.decision = decision
                continue
            if entry is not None:
                await self._remove(name)
            self._add(decision, file, key)
        await self.pools.sync(self.entries)
        self._scanned = True
        self._reroute()
        self._touch()

    def _runs(self, name: str, file: Path) -> bool:
        entry = self.entries.get(name)
        return entry is not None and entry.file == file

    def _add(self, decision: Decision, file: Path, key: str) -> None:
        entry = Entry(decision, file, key)
        name = decision.model.name
        self.entries[name] = entry
        if isinstance(decision, LocalServe) and decision.model.spec.pool is not None:
            entry.detail = f"waiting for its pool {decision.model.spec.pool.name}"
            entry.use = lambda: self._use(entry)
        elif isinstance(decision, LocalServe):
            entry.port = free_port()
            entry.task = asyncio.create_task(self._serve(entry), name=f"serve {name}")
            log.info("%s: serving %s from %s", name, decision.model.spec.model_id, file)
        elif isinstance(decision, RemoteProxy):
            entry.phase, entry.detail = "Proxying", f"key from ${decision.key_env}"
        else:
            entry.phase = "Skipped" if decision.kind == "skipped" else "Unplaceable"
            entry.detail = decision.reason
            log.info("%s: %s: %s", name, entry.phase.lower(), decision.reason)

    async def _remove(self, name: str) -> None:
        entry = self.entries[name]  # its row stays until its process is gone
        for route in self._labels(entry):
            self.gateway.set_unavailable(route, None)
        if entry.task is not None:
            entry.task.cancel()
            # asyncio.wait, not `await entry.task` in suppress(CancelledError): that would
            # also swallow a cancellation of this task (`llmop up` stopping meanwhile)
            await asyncio.wait({entry.task})
        if self.entries.get(name) is entry:
            del self.entries[name]
            log.info("%s: stopped", name)

    async def _stop_all(self) -> None:
        await self.pools.stop_all()
        tasks = [e.task for e in self.entries.values() if e.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _loading(self, entry: Entry) -> str | None:
        """Why a served model's requests wait (its phase), None once it serves or failed."""
        phase, detail, _ = entry.current()
        return f"{phase}: {detail}" if phase in LOADING_PHASES else None

    def _serving(self, entry: Entry, pinning: set[str]) -> Serving:
        """Where the gateway sends a model's requests (router.routes.Serving).

        ``pinning``: the pools (namespace/pool) with a pinned member, taking turns under the
        gateway.
        """
        decision = entry.decision
        if isinstance(decision, LocalServe) and entry.port is not None:
            loading = self._loading(entry)
            self._held[entry.model.name] = loading
            return Serving([] if loading else [Upstream(
                name=entry.model.name, base_url=f"http://{LOOPBACK}:{entry.port}/v1",
                auth="none", slots=decision.slots,  # more wait in the gateway's queue
                # flow control's bound: every slot busy and max_queue waiting, the fairness
                # ID holding the most is refused (429 with Retry-After), never a newcomer
                max_concurrent=decision.slots + self.options.max_queue)], loading or "",
                sleep=sleep_group(decision.model, pinning))
        if isinstance(decision, RemoteProxy):  # build() names it as the router does
            return Serving(route=Route.model_validate(decision.route()))
        return Serving(absent=f"llmop up {entry.phase.lower()} it: {entry.detail}")

    def _reroute(self) -> None:
        """The gateway's routes: every served and proxied model, as the router builds them.

        The same table as in a cluster (router.routes.build): a model answers to its
        modelId, its name and namespace/name; one still loading holds its requests until it
        is Ready (docs/routing.md); a failed one answers 503 with the reason.
        """
        self._held = {}
        pinning = {label for label, members in pooled(self.entries).items()
                   if any(m.model.spec.pool and m.model.spec.pool.pinned for m in members)}
        try:
            table = build(((e.model, self._serving(e, pinning)) for e in self.entries.values()),
                          self._route_options)
            self.gateway.set_routes(table.routes)
        except (ConfigError, ValidationError) as exc:  # the API's validation makes it rare
            log.error("gateway routes rejected, keeping the previous ones: %s", exc)
            return
        self.gateway.set_absent(table.absent)
        self.table = table
        for name, entry in self.entries.items():
            if isinstance(entry.decision, LocalServe):
                self._mark(name, entry)

    def _load(self, entry: Entry) -> dict[str, float | int] | None:
        """The process's load; its waiting requests are those queued in the gateway too."""
        load = entry.load()
        labels = self._labels(entry)
        if load is None or not labels:
            return load
        return {**load, "waiting": load["waiting"] + self.gateway.flow.queued(labels[0])}

    def _use(self, entry: Entry) -> Use:
        """A pool member's requests as the gateway sees them (entries.member_note)."""
        labels = self._labels(entry)
        if not labels:
            return Use(None, False)
        in_flight, idle = self.gateway.route_calls(labels[0]) or (0, None)
        # loaded again since its last request (its router started anew): idle since then
        since = entry.pool.ready_since.get(entry.model.spec.model_id) if entry.pool else None
        if since is not None:
            loaded = time.monotonic() - since
            idle = loaded if idle is None else min(idle, loaded)
        return Use(None if in_flight else idle, bool(in_flight),
                   *self.gateway.route_line(labels[0]))

    def _labels(self, entry: Entry) -> list[str]:
        return self.table.labels.get((entry.model.namespace, entry.model.name), [])

    def _mark(self, name: str, entry: Entry) -> None:
        if isinstance(entry.decision, LocalServe) and entry.port is not None \
                and self._loading(entry) != self._held.get(name, False):
            self._reroute()  # loading began or ended: hold, or route to the process
            return
        phase, detail, _ = entry.current()
        # loading ones hold instead; a pool's member not loaded yet is loaded by its pool
        down = phase not in SERVING and phase not in LOADING_PHASES
        for route in self._labels(entry):
            self.gateway.set_unavailable(route, f"it is {phase.lower()} on this machine "
                                         f"({detail})" if down else None)

    def _engine_env(self) -> dict[str, str]:
        """The environment of a llama-server: no remote model's key, no LLAMA_ARG_*."""
        secrets = {d.key_env for d in (e.decision for e in self.entries.values())
                   if isinstance(d, RemoteProxy)}
        # llama-server reads LLAMA_ARG_* as flags: only the arguments given decide
        return {k: v for k, v in self.options.env.items()
                if k not in secrets and not k.startswith("LLAMA_ARG_")}

    # --- one model's process ----------------------------------------------------------------

    def _refresh(self, entry: Entry) -> None:
        """The gateway and the state files follow the model's new state."""
        self._mark(entry.model.name, entry)
        self._touch()

    async def _prepare(self, entry: Entry) -> Prepared | None:
        """The model's files found and checked (preparing.prepare), its phase followed."""
        return await prepare(entry, self.options.llama_server, self.options.cache_dir,
                             self.machine, lambda: self._refresh(entry))

    async def _serve(self, entry: Entry) -> None:
        """Find the model file, then keep its llama.cpp server running."""
        name, decision = entry.model.name, entry.decision
        assert isinstance(decision, LocalServe) and entry.port is not None
        prepared = await self._prepare(entry)
        if prepared is None:
            return
        argv = [str(prepared.binary),
                *decision.server_args(str(prepared.path), entry.port, prepared.adapters)]
        entry.supervised = Supervised(
            name, argv, base_url=f"http://{LOOPBACK}:{entry.port}",
            log_path=self.options.state.model_log(name),
            on_change=lambda: self._refresh(entry), timing=self.options.timing,
            env=self._engine_env())
        await entry.supervised.run()

