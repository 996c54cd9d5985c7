"""Helpers for gateway tests: a controllable clock and metric lookups."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llm_operator.gateway.app import Gateway

GatewayFactory = Callable[..., Any]  # the `gateway` fixture: await it to get (client, gateway)


class FakeTime:
    """A controllable clock and a sleep that only advances it (tests never really sleep)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def metric(gw: Gateway, name: str, **labels: str) -> float:
    value = gw.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value
