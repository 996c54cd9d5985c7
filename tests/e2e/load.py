"""Steady load for fault tests: clients sending completions back to back, outcomes counted."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp


@dataclass
class Outcome:
    """One request: when it ended, and "ok" or what went wrong; when it was sent."""

    ended: float
    result: str
    sent: float = 0.0


@dataclass
class SteadyLoad:
    """``clients`` clients, each sending the next completion when the last one ends."""

    url: str
    model: str
    clients: int = 4
    max_tokens: int = 4
    timeout: float = 30
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.result != "ok"]

    def summary(self) -> Counter[str]:
        return Counter(o.result for o in self.outcomes)

    async def _client(self, session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        body = {"model": self.model, "prompt": "Q: Name a colour.\nA:",
                "max_tokens": self.max_tokens, "temperature": 0}
        while not stop.is_set():
            sent = time.monotonic()
            try:
                async with session.post(f"{self.url}/completions", json=body) as response:
                    payload = await response.json(content_type=None)
                    ok = response.status == 200 and payload.get("choices")
                    result = "ok" if ok else f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                result = type(exc).__name__
            self.outcomes.append(Outcome(time.monotonic(), result, sent))
            if result != "ok":
                # a refused connection fails in microseconds: do not spin on it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 0.2)

    @contextlib.asynccontextmanager
    async def running(self, hang_up: bool = False) -> AsyncIterator[SteadyLoad]:
        """The load for the duration of the block.

        At its end in-flight requests finish, or with ``hang_up`` the clients close their
        connections at once (not counted): the load ends when the block does, not after a
        queue of slow answers has drained.
        """
        stop = asyncio.Event()
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        connector = aiohttp.TCPConnector(force_close=True)  # every request finds a pod anew
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            tasks = [asyncio.create_task(self._client(session, stop))
                     for _ in range(self.clients)]
            try:
                yield self
            finally:
                stop.set()
                if hang_up:
                    for task in tasks:
                        task.cancel()
                await asyncio.gather(*tasks, return_exceptions=hang_up)
