"""Read a model's requestsPerMinute and averageLatencyMs from Prometheus's HTTP API."""

from __future__ import annotations

import logging
import math

import aiohttp

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.reconcile.queries import status_queries

log = logging.getLogger("llm_operator.operator.prometheus")
TIMEOUT = aiohttp.ClientTimeout(total=3)


async def query_scalar(session: aiohttp.ClientSession, address: str, promql: str
                       ) -> float | None:
    """The single value of an instant query; None when empty, NaN, or on any failure."""
    url = f"{address.rstrip('/')}/api/v1/query"
    try:
        async with session.get(url, params={"query": promql}, timeout=TIMEOUT) as resp:
            if resp.status != 200:
                log.debug("prometheus answered %s for a status query", resp.status)
                return None
            body = await resp.json()
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.debug("prometheus unreachable for status metrics: %s", exc)
        return None
    result = body.get("data", {}).get("result") or []
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) or math.isinf(value) else value


async def status_metrics(session: aiohttp.ClientSession, address: str | None,
                         model: LLMModel) -> tuple[int | None, int | None]:
    """(requestsPerMinute, averageLatencyMs); both None without Prometheus or metrics."""
    queries = status_queries(model)
    if not address or queries is None:
        return None, None
    rpm = await query_scalar(session, address, queries.requests_per_minute)
    latency = await query_scalar(session, address, queries.average_latency_ms)
    return (round(rpm) if rpm is not None else None,
            round(latency) if latency is not None else None)
