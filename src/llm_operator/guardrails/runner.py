"""Guards run in order without blocking the event loop: PII in a worker thread, models asked.

A PII check of a long prompt takes tens of milliseconds of CPU (regular expressions, under
the GIL either way): one worker keeps that from the event loop without taking more than a
core. The scanner is built when the configuration first names a guard, not on a request.
A judge (a guard model) and a moderation endpoint are asked through the server's
``JudgeClient`` (the gateway's routes); one that fails follows its guard's ``onError``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

from llm_operator.api.guardrails import GuardSpec
from llm_operator.guardrails import judges, moderation
from llm_operator.guardrails.guards import Checked, Detector, Direction, applied, record
from llm_operator.guardrails.pii import Finding, kept_in_piece, shared_scanner
from llm_operator.guardrails.possible import pieces, possible
from llm_operator.guardrails.text import Spot

log = logging.getLogger("llm_operator.gateway")
_NOTHING: tuple[tuple[str, ...], float] = ((), 0.0)


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


class TextTooLong(ValueError):
    """More text than the guardrails read (``maxCheckedChars``): nothing was checked."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"{size} characters of text, more than the {limit} this model's "
                         "guardrails read (guardrails.maxCheckedChars)")
        self.size, self.limit = size, limit


class JudgeFailed(RuntimeError):
    """A guard's model could not be asked or did not answer; the message says why (no text)."""


class Trace(Protocol):
    """A request's trace (gateway/telemetry/tracing.py's RequestTrace): a span per guard."""

    def span(self, name: str, attributes: dict[str, Any] | None = None
             ) -> contextlib.AbstractContextManager[Any]: ...

    def note(self, **attributes: Any) -> None: ...


class JudgeClient(Protocol):
    """How a server asks a guard's model (the gateway: its own routes)."""

    async def complete(self, model: str, prompt: str, timeout: float,
                       caller: object = None) -> str:
        """A judge's text completion of ``prompt``.

        ``caller``: whom the checked text came from (the gateway's flow-control
        classification), so the call queues as that client's; None where there is none.
        """
        ...

    async def moderate(self, model: str, texts: Sequence[str], timeout: float,
                       caller: object = None) -> bytes:
        """A moderation endpoint's answer (its body) about ``texts``, for ``caller``."""
        ...


class Guarding:
    """Guards of a server (the gateway, the MCP server): one worker thread, its metrics."""

    def __init__(self, metrics: GuardMetrics, scanner: Callable[[], Detector] | None = None,
                 judge_client: JudgeClient | None = None) -> None:
        self.metrics, self._make = metrics, scanner or shared_scanner
        self.judge_client = judge_client
        self._said: set[tuple[str, str]] = set()  # (guard, why) a judge failed, logged once
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="llmop-guards")
        self._scanner: Future[Detector] | None = None
        self._reported = False

    def prepare(self, needed: bool) -> None:
        """Start building the scanner if ``needed`` (once; a check waits for it)."""
        if self._scanner is None and needed:
            self._scanner = self._worker.submit(self._make)

    async def _detector(self) -> Detector:
        self.prepare(True)
        assert self._scanner is not None
        try:
            return await asyncio.wrap_future(self._scanner)
        except ImportError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.name
            why = (f"the PII detector is not installed here ({first}): install "
                   "llm-operator[guardrails] (presidio-analyzer)")
        except Exception as exc:  # a broken install: said once, every check refused
            why = f"the PII detector failed to start: {type(exc).__name__}: {exc}"
        if not self._reported:
            log.error("guardrails cannot run: %s", why)
            self._reported = True
        raise GuardUnavailable(why)

    async def check(self, where: str, guards: Sequence[GuardSpec], spots: Sequence[Spot],
                    direction: Direction, exempt: Callable[[str], bool], *,
                    context: str = "", trace: Trace | None = None,
                    max_chars: int | None = None, caller: object = None) -> Checked:
        """``guards`` in order over ``spots`` (rewritten in place where one masks), counted.

        ``where``: the route or tool the metrics name; ``context``: an answer's request
        text, which a judge reads beside it; ``trace``: a span per guard (its name,
        direction, and what it found: types, never text); ``caller``: whom the text came
        from, passed to the JudgeClient (a judge's call waits its turn as that client's).
        GuardUnavailable when a detector
        cannot run or a judge fails closed (the caller refuses the request); TextTooLong,
        before any guard runs, when the spots hold more than ``max_chars``.
        """
        size = sum(len(spot.text) for spot in spots)
        if max_chars is not None and size > max_chars:
            raise TextTooLong(size, max_chars)
        started = time.perf_counter()
        checked = Checked()
        try:
            for guard in guards:
                if exempt(guard.name):
                    continue
                with trace.span("llmop.guardrail", {
                        "llmop.guard": guard.name, "llmop.guard.direction": direction,
                        "llmop.guard.detector": guard.detector}
                        ) if trace is not None else contextlib.nullcontext():
                    if guard.pii is not None and not any(
                            possible(guard.pii.wanted, spot.text) for spot in spots):
                        entities, score = _NOTHING  # prose: nothing it looks for can be there
                    elif guard.pii is not None:
                        entities, score, masked = await self._pii(guard, spots, direction)
                        checked.masked |= masked
                    elif guard.judge is not None:
                        entities, score = await self._judged(where, guard, spots, direction,
                                                             context, caller=caller)
                    else:
                        entities, score = await self._moderated(where, guard, spots,
                                                                direction, caller)
                    if trace is not None and entities:
                        trace.note(**{"llmop.guard.found": ",".join(entities)})
                    if record(checked, guard, direction, entities, score):
                        break
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

    async def _pii(self, guard: GuardSpec, spots: Sequence[Spot], direction: Direction
                   ) -> tuple[tuple[str, ...], float, bool]:
        """A PII guard over the spots, a bounded piece at a time on the worker thread.

        Each piece (guardrails/possible.py's PIECE) is one job: a request with much text
        takes turns with the others' pieces instead of holding the worker, and stops at
        the next piece when its client goes away or the server stops (cancellation).
        """
        assert guard.pii is not None
        detector = await self._detector()
        loop = asyncio.get_running_loop()
        threshold = guard.pii.score_threshold
        found: list[list[Finding]] = []
        for spot in spots:
            text = spot.text
            wanted = possible(guard.pii.wanted, text)
            kept: set[Finding] = set()
            for start, end, cut_before, cut_after in pieces(wanted, text) if wanted else ():
                piece = await loop.run_in_executor(self._worker, detector.find,
                                                   text[start:end], wanted, threshold)
                kept.update(kept_in_piece(piece, start, end, cut_before, cut_after))
            found.append(sorted(kept, key=lambda f: (f.start, f.end, f.entity)))
        return applied(guard, spots, found, direction, detector.mask)

    async def _judged(self, where: str, guard: GuardSpec, spots: Sequence[Spot],
                      direction: Direction, context: str, *, caller: object
                      ) -> tuple[tuple[str, ...], float]:
        """The categories a judge found unsafe (none: safe), or its guard's onError."""
        judge = guard.judge
        assert judge is not None
        role: judges.Role = "Agent" if direction == "output" else "User"
        asks = judges.asks(judge.family, judge.chosen, role,
                           "\n\n".join(s.text for s in spots), context)
        try:
            if self.judge_client is None:
                raise JudgeFailed("this server does not ask judges (the router, `llmop "
                                  "gateway` and `llmop up` do)")
            client = self.judge_client
            async with asyncio.timeout(judge.timeout_seconds):
                answers = await asyncio.gather(*(client.complete(
                    judge.model, ask.prompt, judge.timeout_seconds, caller) for ask in asks))
            verdicts = [judges.verdict(judge.family, ask, answer)
                        for ask, answer in zip(asks, answers, strict=True)]
        except (JudgeFailed, judges.Unreadable, TimeoutError) as exc:
            why = str(exc) if not isinstance(exc, TimeoutError) else \
                f"no verdict within {judge.timeout_seconds:g} s"
            return self._asking_failed(where, guard, direction, f"judge {judge.model}: {why}")
        unsafe = [v for v in verdicts if v.unsafe]
        if not unsafe:
            return (), 0.0
        return tuple(sorted({c for v in unsafe for c in v.categories})) or ("unsafe",), 1.0

    async def _moderated(self, where: str, guard: GuardSpec, spots: Sequence[Spot],
                         direction: Direction, caller: object
                         ) -> tuple[tuple[str, ...], float]:
        """The chosen categories the endpoint flags in the spots' texts, or onError."""
        asked = guard.moderation
        assert asked is not None
        texts = [spot.text for spot in spots if spot.text.strip()]
        if not texts:
            return _NOTHING
        try:
            if self.judge_client is None:
                raise JudgeFailed("this server does not ask moderation endpoints (the "
                                  "router, `llmop gateway` and `llmop up` do)")
            async with asyncio.timeout(asked.timeout_seconds):
                raw = await self.judge_client.moderate(asked.model, texts,
                                                       asked.timeout_seconds, caller)
            return moderation.flagged_categories(raw, len(texts), asked.chosen,
                                                 asked.score_threshold)
        except (JudgeFailed, judges.Unreadable, TimeoutError) as exc:
            why = str(exc) if not isinstance(exc, TimeoutError) else \
                f"no answer within {asked.timeout_seconds:g} s"
            return self._asking_failed(where, guard, direction,
                                      f"moderation {asked.model}: {why}")

    def _asking_failed(self, where: str, guard: GuardSpec, direction: Direction, why: str
                      ) -> tuple[tuple[str, ...], float]:
        """onError: closed raises GuardUnavailable; open lets the text through.

        Counted, and logged once per guard and reason.
        """
        if (guard.name, why) not in self._said:
            self._said.add((guard.name, why))
            log.warning("guard %s (%s): %s; failing %s", guard.name, where, why,
                        guard.on_error)
        if guard.on_error == "closed":
            raise GuardUnavailable(f"guard {guard.name!r}: {why}")
        self.metrics.guard_errors.labels(where, direction).inc()
        return (), 0.0

    def close(self) -> None:
        self._worker.shutdown(wait=False, cancel_futures=True)
