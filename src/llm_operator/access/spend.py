"""What each client key has spent, per budget period: the ledger budgets are checked against."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol

from llm_operator.access.keyring import ClientKey, period_of


class Ledger(Protocol):
    """USD spent per (key id, period name); in this process or shared (Redis)."""

    async def spent(self, key_id: str, period: str) -> float: ...

    async def add(self, key_id: str, period: str, usd: float) -> float: ...


class MemoryLedger:
    """The embedded ledger: one process's spend, lost on restart."""

    def __init__(self) -> None:
        self._spent: dict[tuple[str, str], float] = {}

    async def spent(self, key_id: str, period: str) -> float:
        return self._spent.get((key_id, period), 0.0)

    async def add(self, key_id: str, period: str, usd: float) -> float:
        total = self._spent[key_id, period] = self._spent.get((key_id, period), 0.0) + usd
        return total


@dataclass(frozen=True)
class Overspent:
    """A key at or over its budget: what to tell the client."""

    key_id: str
    spent: float
    usd: float
    period: str
    renews: dt.datetime | None

    @property
    def message(self) -> str:
        when = "never (a total budget)" if self.renews is None else \
            f"at {self.renews.strftime('%Y-%m-%d %H:%M')} UTC"
        return (f"key {self.key_id!r} has spent ${self.spent:.4f} of its ${self.usd:g} budget "
                f"for {self.period}; it renews {when}")


async def over_budget(key: ClientKey, ledger: Ledger, now: dt.datetime) -> Overspent | None:
    """None while the key may spend; it is checked before a request, charged after."""
    if key.budget is None:
        return None
    period, renews = period_of(key.budget.period, now)
    spent = await ledger.spent(key.id, period)
    if spent < key.budget.usd:
        return None
    return Overspent(key.id, spent, key.budget.usd, period, renews)
