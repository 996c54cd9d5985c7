"""A model tool's call: the caller's allowance, a slot of the model's, the model's endpoint."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import mcp_types as types
from mcp.shared.exceptions import MCPError

from llm_operator.api.guardrails import GuardSpec
from llm_operator.guardrails.guards import Direction
from llm_operator.guardrails.runner import Guarding, GuardUnavailable, JudgeClient, TextTooLong
from llm_operator.guardrails.text import answer_spots, drop_unmaskable, request_spots
from llm_operator.mcp_server import failures
from llm_operator.mcp_server.auth import Caller, McpAuth
from llm_operator.mcp_server.metrics import McpMetrics
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.registry.catalog import ToolRecord
from llm_operator.registry.tools import chat_arguments, chat_request, chat_result

log = logging.getLogger(__name__)


Exempt = Callable[[str], bool]


def _never(_: str) -> bool:
    return False


def failure(message: str) -> types.CallToolResult:
    """A tool error the calling model reads (SEP-1303), logged."""
    log.warning("tool call failed: %s", message)
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)],
                                is_error=True)


@dataclass
class ModelCalls:
    """Calls of model tools: at most ``max_concurrent_calls`` per tool, the rest wait."""

    settings: McpSettings
    metrics: McpMetrics
    auth: McpAuth | None
    http: aiohttp.ClientSession | None = None  # set while the app runs
    guarding: Guarding | None = None  # the models' guardrails (None: the app's own, lazily)
    judges: JudgeClient | None = None  # how a guard's judge is asked (the catalog's models)
    _slots: dict[str, asyncio.Semaphore] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.guarding is None:
            self.guarding = Guarding(self.metrics, judge_client=self.judges)

    async def _guarded(self, record: ToolRecord, guards: Sequence[GuardSpec],
                       body: dict[str, Any], direction: Direction, exempt: Exempt
                       ) -> tuple[types.CallToolResult, str] | None:
        """The model's guards over a call (``input``) or its answer: None, or the failure.

        A masking guard rewrites ``body`` in place, as the router does a request's.
        """
        assert self.guarding is not None
        if direction == "input":
            spots = request_spots(f"/{record.path}", body)
        else:
            drop_unmaskable(body)  # the agent reads no token list the guards cannot mask
            spots = answer_spots(body)
        if not spots:
            return None
        rails = record.guardrails
        try:
            checked = await self.guarding.check(
                record.tool_name, guards, spots, direction, exempt,
                max_chars=rails.max_checked_chars if rails is not None else None)
        except TextTooLong as exc:
            what = "this call" if direction == "input" else "the model's answer"
            return failure(f"{what} holds {exc}: send less text"), "guardrail_text_too_long"
        except GuardUnavailable as exc:
            return failure(f"the guardrails of model {record.model_id} cannot run: {exc}"), \
                "guardrail_unavailable"
        if checked.blocked is None:
            return None
        found = checked.blocked
        what = "this call" if direction == "input" else "the model's answer"
        return failure(f"guardrail {found.guard!r} of model {record.model_id} blocked {what}: "
                       f"it found {', '.join(found.entities)}; leave that out"), \
            "guardrail_blocked"

    async def as_caller(self, caller: Caller, record: ToolRecord,
                        arguments: dict[str, Any] | None) -> types.CallToolResult:
        """A call by an authenticated client: its allow-list, then its calls per minute."""
        assert self.auth is not None
        if not caller.may_call(record.tool_name, record.model_id):
            self.metrics.key_calls.labels(caller.id, "forbidden").inc()
            raise MCPError(types.INVALID_PARAMS, f"key {caller.id!r} may not call tool "
                           f"{record.tool_name}; ask the server's operator to allow it")
        wait = self.auth.call_wait(caller)
        if wait > 0:
            self.metrics.key_calls.labels(caller.id, "rate_limited").inc()
            return failure(f"rate limit of key {caller.id!r} reached; retry after "
                           f"{math.ceil(wait)} s")
        exempt = caller.key.exempt_from if caller.key is not None else _never
        result = await self.call(record, arguments, exempt)
        self.metrics.key_calls.labels(caller.id, "error" if result.is_error else "ok").inc()
        return result

    def _slot(self, tool: str) -> asyncio.Semaphore:
        slot = self._slots.get(tool)
        if slot is None:
            slot = self._slots[tool] = asyncio.Semaphore(self.settings.max_concurrent_calls)
        return slot

    async def call(self, record: ToolRecord, arguments: dict[str, Any] | None,
                   exempt: Exempt = _never) -> types.CallToolResult:
        """The model's input guards; one of its slots (its own timeout); the call (another).

        ``exempt``: the guards the caller's key is exempted from.
        """
        args = chat_arguments(arguments, thinking=record.facets.supports_thinking)
        body, thinking = chat_request(record, args)
        tool, metrics = record.tool_name, self.metrics
        rails = record.guardrails
        if rails is not None and rails.input and (
                refused := await self._guarded(record, rails.input, body, "input", exempt)):
            metrics.calls.labels(tool, refused[1]).inc()
            return refused[0]
        who = f"model {record.model_id} ({tool})"
        slot = self._slot(tool)
        metrics.queued.labels(tool).inc()
        waited = time.monotonic()
        try:
            async with asyncio.timeout(self.settings.call_timeout):
                await slot.acquire()
        except TimeoutError:
            metrics.calls.labels(tool, "timeout").inc()
            return failure(f"{who} had no free slot within {self.settings.call_timeout:g} s: "
                           f"{self.settings.max_concurrent_calls} calls to it are in flight; "
                           "try again shortly")
        finally:
            metrics.queued.labels(tool).dec()
        metrics.queue_wait.labels(tool).observe(time.monotonic() - waited)
        metrics.in_flight.labels(tool).inc()
        started = time.monotonic()
        try:
            result, outcome = await self._post(record, body, thinking, who, exempt)
        finally:
            slot.release()
            metrics.in_flight.labels(tool).dec()
            metrics.duration.labels(tool).observe(time.monotonic() - started)
        metrics.calls.labels(tool, outcome).inc()
        usage = (result.structured_content or {}).get("usage") or {}
        for kind, key in (("prompt", "promptTokens"), ("completion", "completionTokens")):
            if usage.get(key):
                metrics.tokens.labels(tool, kind).inc(usage[key])
        return result

    async def _post(self, record: ToolRecord, body: dict[str, Any], thinking: bool, who: str,
                    exempt: Exempt) -> tuple[types.CallToolResult, str]:
        """One call to the model's endpoint: the tool result and its outcome label.

        The answer passes the model's output guards before the agent reads it.
        """
        assert self.http is not None and record.endpoint
        url = f"{record.endpoint.rstrip('/')}/{record.path}"
        try:
            async with self.http.post(url, json=body, timeout=aiohttp.ClientTimeout(
                    total=self.settings.call_timeout)) as r:
                raw = await r.text(errors="replace")
                try:
                    payload = json.loads(raw)
                except ValueError:
                    payload = None
                if r.status >= 400:  # the agent gets the meaning; the log, the detail
                    log.warning("%s answered HTTP %d: %s", who, r.status,
                                failures.detail(payload, raw))
                    return failure(failures.summary(who, r.status)), "upstream_error"
            rails = record.guardrails
            if rails is not None and rails.output and isinstance(payload, dict) and (
                    refused := await self._guarded(record, rails.output, payload, "output",
                                                   exempt)):
                return refused
            text, structured = chat_result(record, payload, thinking)
        except TimeoutError:
            return failure(f"{who} did not answer within {self.settings.call_timeout:g} s"), \
                "timeout"
        except aiohttp.ClientError as exc:
            return failure(f"could not reach {who} ({type(exc).__name__}); it may be starting "
                           "or scaling up, try again shortly"), "unreachable"
        except ValueError:
            return failure(f"{who} returned a response that is not a chat completion"), \
                "bad_response"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                    structured_content=structured), "ok"
