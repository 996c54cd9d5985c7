"""Guards run off the event loop: the PII scanner built once, checks in a worker thread.

A check of a long prompt takes tens of milliseconds of CPU (regular expressions, under the
GIL either way): one worker keeps that from the event loop without taking more than a core.
The scanner is built when the configuration first names a guard, not on a request.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from llm_operator.api.guardrails import GuardSpec
from llm_operator.guardrails.guards import Checked, Detector, Direction, run_guards
from llm_operator.guardrails.pii import shared_scanner
from llm_operator.guardrails.text import Spot

log = logging.getLogger("llm_operator.gateway")


class GuardMetrics(Protocol):
    """Where the runner counts (the gateway's metrics by route, the MCP server's by tool).

    Each is a labelled Prometheus metric: activations (where, guard, direction, action,
    entity), seconds (where, direction), errors (where, direction).
    """

    guard_activations: Any
    guard_seconds: Any
    guard_errors: Any


class GuardUnavailable(RuntimeError):
    """A guard's detector cannot run here; the message says why and what to install."""


class Guarding:
    """Guards of a server (the gateway, the MCP server): one worker thread, its metrics."""

    def __init__(self, metrics: GuardMetrics,
                 scanner: Callable[[], Detector] | None = None) -> None:
        self.metrics, self._make = metrics, scanner or shared_scanner
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="llmop-guards")
        self._scanner: Future[Detector] | None = None
        self._reported = False

    def prepare(self, needed: bool) -> None:
        """Start building the scanner if ``needed`` (once; a check waits for it)."""
        if self._scanner is None and needed:
            self._scanner = self._worker.submit(self._make)

    async def _detector(self) -> Detector:
        if self._scanner is None:
            self._scanner = self._worker.submit(self._make)
        try:
            return await asyncio.wrap_future(self._scanner)
        except ImportError as exc:
            why = (f"the PII detector is not installed here ({exc.name or exc}): install "
                   "llm-operator[guardrails] (presidio-analyzer, presidio-anonymizer)")
        except Exception as exc:  # a broken install: said once, every check refused
            why = f"the PII detector failed to start: {type(exc).__name__}: {exc}"
        if not self._reported:
            log.error("guardrails cannot run: %s", why)
            self._reported = True
        raise GuardUnavailable(why)

    async def check(self, where: str, guards: Sequence[GuardSpec], spots: Sequence[Spot],
                    direction: Direction, exempt: Callable[[str], bool]) -> Checked:
        """``guards`` over ``spots`` (rewritten in place where a guard masks), counted.

        ``where``: the route or tool the metrics name. GuardUnavailable when the detector
        cannot run (the caller refuses the request).
        """
        started = time.perf_counter()
        try:
            detector = await self._detector()
            checked = await asyncio.get_running_loop().run_in_executor(
                self._worker, run_guards, guards, spots, detector, direction, exempt)
        except GuardUnavailable:
            self.metrics.guard_errors.labels(where, direction).inc()
            raise
        self.metrics.guard_seconds.labels(where, direction).observe(
            time.perf_counter() - started)
        for found in checked.activations:
            for entity in found.entities:
                self.metrics.guard_activations.labels(
                    where, found.guard, found.direction, found.action, entity).inc()
        return checked

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
