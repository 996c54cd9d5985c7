"""The most a count reached lately (gateway/flow/recent_peak.py), for a 10 s window."""

from __future__ import annotations

import pytest

from llm_operator.gateway.flow.recent_peak import RecentPeak


# (values seen, as (second, value); then asked at a second with the count then; expected)
@pytest.mark.parametrize(("seen", "asked_at", "now", "most"), [
    ([], 5.0, 0, 0),
    ([], 5.0, 3, 3),  # the count now counts, seen or not
    ([(1.0, 4)], 1.0, 0, 4),
    ([(1.0, 4)], 10.9, 0, 4),  # within its window
    ([(1.0, 4)], 19.0, 0, 4),  # the window after it
    ([(1.0, 4)], 20.0, 0, 0),  # two windows on: forgotten
    ([(1.0, 4), (12.0, 2)], 19.0, 0, 4),
    ([(1.0, 4), (12.0, 2)], 25.0, 1, 2),  # the older peak forgotten, the newer kept
    ([(1.0, 4)], 45.0, 0, 0),  # asked only long after: nothing left
], ids=["nothing", "the-count-now", "just-seen", "same-window", "next-window",
        "forgotten", "the-higher-of-two", "the-newer-of-two", "long-quiet"])
def test_a_peak_is_kept_one_to_two_windows(seen: list[tuple[float, int]], asked_at: float,
                                           now: int, most: int) -> None:
    peak = RecentPeak(10.0, 0.0)
    for second, value in seen:
        peak.see(value, second)
    assert peak.most(now, asked_at) == most
