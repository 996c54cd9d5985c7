"""Limits and spend in Redis, shared by every gateway replica, with a local fallback.

Buckets live in Redis; each replica leases tokens from them in slices (1 % of the limit,
at least what the request needs) and spends its lease locally, so a busy gateway calls
Redis about once per hundred requests while the whole stays within the limit (what a
replica holds unspent is at most one slice). Spend is added up locally and written to
Redis within ``flush_seconds``; reads are at most that old.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from llm_operator.access.limits import Limits, Reservation, admit, estimate_tokens
from llm_operator.access.spend import Ledger

log = logging.getLogger("llm_operator.access")

RETRY_SECONDS = 5.0  # after a failure, this process uses its own limits this long
TIMEOUT_SECONDS = 0.25  # a Redis call slower than this counts as Redis being down
SPEND_TTL_SECONDS = 400 * 86400  # spend keys outlive any budget period
LEASE_FRACTION = 0.01  # of a limit, leased at once by one replica
POOL_SIZE = 32  # connections to Redis per gateway process; more calls wait their turn
Failure = (RedisError, OSError, TimeoutError)

# Token buckets as hashes {level, at}, refilled with the server's clock so replicas agree.
# LEASE takes from each bucket KEYS[i] (capacity ARGV[3i] per minute) at least ARGV[3i-2]
# and up to ARGV[3i-1] units, from every bucket or from none. It answers the grants, or
# {"wait", seconds, i} naming the bucket that refused and how long until it would fit.
LEASE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local levels, worst, who = {}, 0, 0
for i = 1, #KEYS do
  local least, cap = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i])
  local v = redis.call('HMGET', KEYS[i], 'level', 'at')
  local level = tonumber(v[1]) or cap
  local at = tonumber(v[2]) or now
  levels[i] = math.min(cap, level + math.max(0, now - at) * cap / 60)
  local wait = (least - levels[i]) * 60 / cap
  if wait > worst then worst, who = wait, i end
end
if worst > 0 then return {'wait', tostring(worst), tostring(who)} end
local grants = {}
for i = 1, #KEYS do
  local grant = math.max(tonumber(ARGV[3 * i - 2]), math.min(tonumber(ARGV[3 * i - 1]), levels[i]))
  redis.call('HSET', KEYS[i], 'level', tostring(levels[i] - grant), 'at', tostring(now))
  redis.call('EXPIRE', KEYS[i], 120)
  grants[i] = tostring(grant)
end
return grants
"""


def redis_client(url: str, password: str | None = None) -> aioredis.Redis:
    """A client whose calls wait for one of POOL_SIZE connections, up to TIMEOUT_SECONDS.

    The default pool raises MaxConnectionsError once 100 calls are in flight, which under
    load silently sent every gateway to its local fallback: bench/gateway found it.
    """
    pool = aioredis.BlockingConnectionPool.from_url(
        url, password=password, max_connections=POOL_SIZE, timeout=TIMEOUT_SECONDS,
        socket_timeout=TIMEOUT_SECONDS, socket_connect_timeout=TIMEOUT_SECONDS)
    return aioredis.Redis.from_pool(pool)  # the client owns it: aclose() closes its sockets


@dataclass
class SharedLimits:
    """Admits requests against leases of buckets in Redis; while it is down, locally.

    ``on_state`` is told True/False when Redis becomes reachable/unreachable (a metric).
    """

    client: aioredis.Redis
    prefix: str = "llmop"
    on_state: Callable[[bool], None] = lambda up: None
    clock: Callable[[], float] = time.monotonic
    up: bool = True
    _retry_at: float = 0.0
    leases: dict[str, float] = field(default_factory=dict)  # bucket key -> units held here
    _bucket_keys: dict[tuple[str, str], str] = field(default_factory=dict)  # (ident, kind)

    def __post_init__(self) -> None:
        self._lease = self.client.register_script(LEASE)

    def failed(self, exc: BaseException) -> None:
        """Redis did not answer: use local limits for a while, say so once."""
        self._retry_at = self.clock() + RETRY_SECONDS
        if self.up:
            self.up = False
            log.warning("Redis unreachable (%s): limits and spend are per gateway process "
                        "until it answers again", type(exc).__name__)
            self.on_state(False)

    def back(self) -> None:
        if not self.up:
            self.up = True
            log.info("Redis reachable again: limits and spend are shared")
            self.on_state(True)

    def usable(self) -> bool:
        return self.up or self.clock() >= self._retry_at

    def _bucket_key(self, ident: str, kind: str) -> str:
        key = self._bucket_keys.get((ident, kind))
        if key is None:
            key = self._bucket_keys[(ident, kind)] = f"{self.prefix}:bucket:{ident}:{kind}"
        return key

    async def admit(self, parties: list[Limits], body: dict[str, Any],
                    reservation: Reservation) -> tuple[Limits, float] | None:
        """As ``limits.admit`` across every replica; the local one while Redis is down."""
        tokens = float(estimate_tokens(body))
        specs = [(p, kind, total, 1.0 if kind == "rpm" else min(tokens, float(total)),
                  self._bucket_key(p.ident, kind))
                 for p in parties for kind, total in zip(("rpm", "tpm"), p.totals, strict=True)
                 if total]
        if not specs or not self.usable():
            return admit(parties, body, reservation)
        short = [(i, units - self.leases.get(key, 0.0), total)
                 for i, (_, _, total, units, key) in enumerate(specs)
                 if self.leases.get(key, 0.0) < units]
        if short:
            argv: list[float] = []
            for _, least, total in short:
                argv += [least, max(least, math.floor(total * LEASE_FRACTION)), total]
            try:
                async with asyncio.timeout(TIMEOUT_SECONDS):
                    answer = await self._lease(keys=[specs[i][4] for i, _, _ in short],
                                               args=argv)
            except Failure as exc:
                self.failed(exc)
                return admit(parties, body, reservation)
            self.back()
            answer = [a.decode() if isinstance(a, bytes) else str(a) for a in answer]
            if answer[0] == "wait":
                return specs[short[int(answer[2]) - 1][0]][0], float(answer[1])
            for (i, _, _), granted in zip(short, answer, strict=True):
                key = specs[i][4]
                self.leases[key] = self.leases.get(key, 0.0) + float(granted)
        for _, kind, _, units, key in specs:
            self.leases[key] -= units
            if kind == "tpm":
                reservation.taken.append((Lease(self, key), units))
        return None


@dataclass
class Lease:
    """Tokens leased from a bucket in Redis, as a reservation gives back to them."""

    limits: SharedLimits
    key: str

    def spend(self, units: float) -> None:
        self.limits.leases[self.key] = self.limits.leases.get(self.key, 0.0) - units


@dataclass
class RedisLedger(Ledger):
    """Spend per key and period in Redis: survives restarts, every replica adds to it.

    Additions are written within ``flush_seconds`` (0: at once); reads of another
    replica's spend are at most that old. While Redis is down they wait here, unlost.
    """

    shared: SharedLimits
    flush_seconds: float = 0.25
    _known: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    _unflushed: dict[tuple[str, str], float] = field(default_factory=dict)
    _flusher: asyncio.Task[None] | None = None

    def _key(self, key_id: str, period: str) -> str:
        return f"{self.shared.prefix}:spend:{key_id}:{period}"

    async def spent(self, key_id: str, period: str) -> float:
        entry = (key_id, period)
        known, at = self._known.get(entry, (0.0, -math.inf))
        local = self._unflushed.get(entry, 0.0)
        if self.shared.clock() - at <= self.flush_seconds or not self.shared.usable():
            return known + local
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                value = await self.shared.client.get(self._key(key_id, period))
        except Failure as exc:
            self.shared.failed(exc)
            return known + local
        self._known[entry] = (float(value or 0), self.shared.clock())
        return self._known[entry][0] + local

    async def add(self, key_id: str, period: str, usd: float) -> float:
        entry = (key_id, period)
        self._unflushed[entry] = self._unflushed.get(entry, 0.0) + usd
        if self.flush_seconds <= 0:
            await self.flush()
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())
        return await self.spent(key_id, period)

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_seconds)
        await self.flush()

    async def flush(self) -> None:
        """Write what was added here to Redis (kept here if Redis does not answer)."""
        if not self._unflushed or not self.shared.usable():
            return
        pending, self._unflushed = self._unflushed, {}
        pipe = self.shared.client.pipeline(transaction=False)
        for (key_id, period), usd in pending.items():
            pipe.incrbyfloat(self._key(key_id, period), usd)
            pipe.expire(self._key(key_id, period), SPEND_TTL_SECONDS)
        try:
            async with asyncio.timeout(TIMEOUT_SECONDS):
                results = await pipe.execute()
        except Failure as exc:
            self.shared.failed(exc)
            for entry, usd in pending.items():  # not lost: written with the next flush
                self._unflushed[entry] = self._unflushed.get(entry, 0.0) + usd
            return
        self.shared.back()
        now = self.shared.clock()
        for entry, total in zip(pending, results[::2], strict=True):
            self._known[entry] = (float(total), now)

    async def close(self) -> None:
        """Flush what is left (the gateway is stopping)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.flush()


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
