"""Limits and spend in Redis, shared by every gateway replica, with a local fallback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from llm_operator.access.limits import Limits, Reservation, admit, estimate_tokens
from llm_operator.access.spend import Ledger, MemoryLedger

log = logging.getLogger("llm_operator.access")

RETRY_SECONDS = 5.0  # after a failure, this process uses its own limits this long
TIMEOUT_SECONDS = 0.25  # a Redis call slower than this counts as Redis being down
SPEND_TTL_SECONDS = 400 * 86400  # spend keys outlive any budget period

# Token buckets as hashes {level, at}, refilled with the server's clock so replicas agree.
# ADMIT takes ARGV[2i-1] units from bucket KEYS[i] of capacity ARGV[2i] (per minute), from
# every bucket or from none; it answers "0", or "<seconds until it would fit> <i>" naming the
# bucket that refused.
_REFILL = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local function level_of(key, cap)
  local v = redis.call('HMGET', key, 'level', 'at')
  local level = tonumber(v[1]) or cap
  local at = tonumber(v[2]) or now
  return math.min(cap, level + math.max(0, now - at) * cap / 60)
end
"""
ADMIT = _REFILL + """
local levels, worst, who = {}, 0, 0
for i = 1, #KEYS do
  local units, cap = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  levels[i] = level_of(KEYS[i], cap)
  local wait = (units - levels[i]) * 60 / cap
  if wait > worst then worst, who = wait, i end
end
if worst > 0 then return tostring(worst) .. ' ' .. tostring(who) end
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], 'level', tostring(levels[i] - tonumber(ARGV[2 * i - 1])),
             'at', tostring(now))
  redis.call('EXPIRE', KEYS[i], 120)
end
return '0'
"""
# SPEND charges ARGV[1] units (negative: gives back) to bucket KEYS[1] of capacity ARGV[2].
SPEND = _REFILL + """
local cap = tonumber(ARGV[2])
local level = math.min(cap, level_of(KEYS[1], cap) - tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'level', tostring(level), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], 120)
return tostring(level)
"""


POOL_SIZE = 32  # connections to Redis per gateway process; more requests wait their turn


def redis_client(url: str, password: str | None = None) -> aioredis.Redis:
    """A client whose calls wait for one of POOL_SIZE connections, up to TIMEOUT_SECONDS.

    The default pool raises MaxConnectionsError once 100 calls are in flight, which under
    load (requests plus their background settlements) silently sent every gateway to its
    local fallback: bench/gateway found it.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url, password=password, max_connections=POOL_SIZE, timeout=TIMEOUT_SECONDS,
        socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS)
    return aioredis.Redis(connection_pool=pool)


@dataclass
class SharedLimits:
    """Admits requests against buckets in Redis; while Redis is down, against local ones.

    ``on_state`` is told True/False when Redis becomes reachable/unreachable (a metric).
    """

    client: aioredis.Redis
    prefix: str = "llmop"
    on_state: Callable[[bool], None] = lambda up: None
    clock: Callable[[], float] = time.monotonic
    up: bool = True
    _retry_at: float = 0.0
    _pending: set[asyncio.Task[Any]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self._admit = self.client.register_script(ADMIT)
        self._spend = self.client.register_script(SPEND)

    def failed(self, exc: BaseException) -> None:
        """Redis did not answer: use local limits for a while, say so once."""
        self._retry_at = self.clock() + RETRY_SECONDS
        if self.up:
            self.up = False
            log.warning("Redis unreachable (%s): limits and spend are per gateway process "
                        "until it answers again", type(exc).__name__)
            self.on_state(False)

    def _back(self) -> None:
        if not self.up:
            self.up = True
            log.info("Redis reachable again: limits and spend are shared")
            self.on_state(True)

    def usable(self) -> bool:
        return self.up or self.clock() >= self._retry_at

    async def admit(self, parties: list[Limits], body: dict[str, Any],
                    reservation: Reservation) -> tuple[Limits, float] | None:
        """As ``limits.admit`` across every replica; the local one while Redis is down."""
        specs = [(p, kind, total) for p in parties
                 for kind, total in zip(("rpm", "tpm"), p.totals, strict=True) if total]
        if not specs or not self.usable():
            return admit(parties, body, reservation)
        tokens = float(estimate_tokens(body))
        keys, argv = [], []
        for party, kind, total in specs:
            keys.append(f"{self.prefix}:bucket:{party.ident}:{kind}")
            argv += [1.0 if kind == "rpm" else min(tokens, float(total)), total]
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                answer = await self._admit(keys=keys, args=argv)
        except (RedisError, OSError, TimeoutError) as exc:
            self.failed(exc)
            return admit(parties, body, reservation)
        self._back()
        wait, _, who = (answer.decode() if isinstance(answer, bytes) else str(answer)
                        ).partition(" ")
        if float(wait) > 0:
            return specs[int(who) - 1][0], float(wait)
        for (_, kind, total), key, units in zip(specs, keys, argv[::2], strict=True):
            if kind == "tpm":
                reservation.taken.append((SharedBucket(self, key, int(total)), units))
        return None

    def charge(self, key: str, capacity: int, units: float) -> None:
        """Settle a reservation in the background (the answer is already on its way)."""
        async def run() -> None:
            try:
                async with asyncio.timeout(TIMEOUT_SECONDS):
                    await self._spend(keys=[key], args=[units, capacity])
            except (RedisError, OSError, TimeoutError) as exc:
                self.failed(exc)
        task = asyncio.get_running_loop().create_task(run())
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)


@dataclass
class SharedBucket:
    """A token bucket in Redis, as a reservation gives back to it."""

    limits: SharedLimits
    key: str
    capacity: int

    def spend(self, units: float) -> None:
        if units:
            self.limits.charge(self.key, self.capacity, units)


@dataclass
class RedisLedger(Ledger):
    """Spend per key and period in Redis (survives restarts; every replica adds to it).

    While Redis is down spend is counted in ``fallback`` and not lost from this process.
    """

    shared: SharedLimits
    fallback: MemoryLedger = field(default_factory=MemoryLedger)

    def _key(self, key_id: str, period: str) -> str:
        return f"{self.shared.prefix}:spend:{key_id}:{period}"

    async def spent(self, key_id: str, period: str) -> float:
        local = await self.fallback.spent(key_id, period)
        if not self.shared.usable():
            return local
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                value = await self.shared.client.get(self._key(key_id, period))
        except (RedisError, OSError, TimeoutError) as exc:
            self.shared.failed(exc)  # one health state for limits and spend
            return local
        return float(value or 0) + local

    async def add(self, key_id: str, period: str, usd: float) -> float:
        if self.shared.usable():
            try:
                async with asyncio.timeout(TIMEOUT_SECONDS):
                    pipe = self.shared.client.pipeline(transaction=False)
                    pipe.incrbyfloat(self._key(key_id, period), usd)
                    pipe.expire(self._key(key_id, period), SPEND_TTL_SECONDS)
                    total, _ = await pipe.execute()
                return float(total) + await self.fallback.spent(key_id, period)
            except (RedisError, OSError, TimeoutError) as exc:
                self.shared.failed(exc)
        return await self.fallback.add(key_id, period, usd)


async def spend_entries(client: aioredis.Redis, prefix: str) -> dict[tuple[str, str], float]:
    """Every (key id, period) -> USD recorded in Redis (for `llmop gateway spend`)."""
    out: dict[tuple[str, str], float] = {}
    base = f"{prefix}:spend:"
    async for raw in client.scan_iter(match=f"{base}*", count=500):
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        key_id, _, period = name[len(base):].rpartition(":")
        value = await client.get(name)
        if key_id and value is not None:
            out[key_id, period] = float(value)
    return out
