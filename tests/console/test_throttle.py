"""Failed sign-ins per address: an address that fails too often waits; others do not."""

from __future__ import annotations

import pytest

from llm_operator.console.throttle import SignInThrottle


@pytest.mark.parametrize(("failures", "at", "wait"), [
    ([], 0.0, 0.0),  # never failed
    ([0.0, 1.0], 2.0, 0.0),  # under the limit
    ([0.0, 1.0, 2.0], 3.0, 57.0),  # at the limit: until the oldest is a minute old
    ([0.0, 1.0, 2.0], 60.0, 0.0),  # the oldest has left the window: one try more
    ([0.0, 1.0, 2.0], 59.5, 0.5),
    ([0.0, 30.0, 40.0], 61.0, 0.0),
])
def test_an_address_waits_once_it_has_failed_the_limit_within_the_window(
        failures: list[float], at: float, wait: float) -> None:
    throttle = SignInThrottle(limit=3, window=60.0)
    for when in failures:
        throttle.failed("10.0.0.1", when)
    assert throttle.wait("10.0.0.1", at) == pytest.approx(wait)
    assert throttle.wait("10.0.0.2", at) == 0.0  # another address is not held


def test_the_addresses_kept_are_bounded_the_least_recent_forgotten_first() -> None:
    throttle = SignInThrottle(limit=1, window=60.0, kept=2)
    for address in ("a", "b", "c"):
        throttle.failed(address, 0.0)
    assert [throttle.wait(a, 1.0) for a in ("a", "b", "c")] == [0.0, 59.0, 59.0]
