"""What a look at a model's engines changes: their loads, engine queues and quiet bands.

gateway/flow/engine_watch.py asks the engines; this decides which pools it asks about and
what their answers mean: each replica's load (for picking), its engine queue
(gateway/flow/saturation.py) and so its pool's slots in flow control, and, on the router,
whether a band with ``idleSeconds`` may run beside requests another gateway sent.
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit

from llm_operator.gateway.flow.control import Flow
from llm_operator.gateway.flow.saturation import EngineReport, Saturation
from llm_operator.gateway.routing.routes import RouteTable, pools
from llm_operator.gateway.telemetry.metrics import GatewayMetrics

log = logging.getLogger("llm_operator.gateway")


class Looks:
    """The pools worth a look now, and what each look found."""

    def __init__(self, table: RouteTable, flow: Flow, saturation: Saturation,
                 metrics: GatewayMetrics) -> None:
        self.table, self.flow, self.saturation = table, flow, saturation
        self.metrics = metrics
        # the router: every engine's load this often, for picking (None: busy pools only)
        self.sweep_seconds: float | None = None

    @property
    def wanted(self) -> bool:
        """Whether anything needs looks: adaptive engine queues, or the router's bands."""
        return self.saturation.adaptive or self.flow.look_every is not None \
            or self.sweep_seconds is not None

    def all_engines(self) -> list[str]:
        """Every replica of every route: what a sweep reads."""
        return sorted({d.url_base for state in self.table.routes.values()
                       for d in state.deployments})

    def loaded(self, url: str, report: EngineReport) -> None:
        """A sweep's report: the replica's load, which picking reads."""
        self.table.engine_load(url, waiting=report.waiting, running=report.running,
                               kv_usage=report.kv_usage)

    def every(self) -> float:
        """Seconds between looks: the router's own cadence, else the saturation setting."""
        every = self.flow.look_every
        return every if every is not None else \
            self.table.config.flow_control.saturation.look_seconds

    def pools(self) -> list[str]:
        """Pools with requests waiting here or every slot taken.

        On the router also those where a band with ``idleSeconds`` waits or runs.
        """
        wanted = set(self.flow.busy()) if self.saturation.adaptive else set()
        if self.flow.look_every is not None:
            wanted.update(self.flow.held_back())
        return sorted(wanted)

    def engines(self, pool: str) -> list[str]:
        return sorted(self.table.pool_engines(pool))

    def looked(self, pool: str, reports: dict[str, EngineReport | None]) -> None:
        """Take in what ``pool``'s engines reported (None: no answer)."""
        table, flow = self.table, self.flow
        engines = table.pool_engines(pool)
        slots = table.pool_slots(pool)
        demand = flow.queued(pool) > 0
        changed = False
        for url, report in reports.items():
            if report is not None:
                table.engine_load(url, waiting=report.waiting, running=report.running,
                                  kv_usage=report.kv_usage)
            count = slots.get(url)
            if count is None:
                continue
            moved, lost = self.saturation.looked(url, report, slots=count, demand=demand)
            changed |= moved
            if report is None:
                self.metrics.engine_unreadable.labels(pool).inc()
                if lost:
                    where = urlsplit(url)  # no user:password@ in a log
                    log.warning("%s://%s%s: the engine's /metrics did not answer; its engine "
                                "queue stays flowControl.engineQueue until it does",
                                where.scheme, where.netloc.rpartition("@")[2], where.path)
        if changed:
            sized = pools(table.config, self.saturation.headroom)
            flow.resize(sized)
            self.metrics.engine_queue.labels(pool).set(
                sum(self.saturation.headroom(url) for url in slots))
        # a look that saw every engine (a model with none has nothing to say)
        if reports and None not in reports.values() and flow.look_every is not None:
            flow.looked(pool, outside=any(
                report.waiting + report.running > engines[url].in_flight
                for url, report in reports.items() if report is not None and url in engines))
