"""Client keys as stored: parsing, matching, budget periods and the all-or-nothing limits."""

from __future__ import annotations

import datetime as dt

import pytest

from llm_operator.access.keyring import (
    KEY_PREFIX,
    ClientKey,
    KeyringError,
    digest,
    new_key,
    parse_keyring,
    period_of,
)
from llm_operator.access.limits import Limits, Reservation, TokenBucket, admit

DIGEST = digest("sk-llmop-test")


def test_a_presented_key_is_found_by_its_digest_only() -> None:
    ring = parse_keyring({"keys": [{"id": "search", "sha256": DIGEST}]})
    found = ring.find("sk-llmop-test")
    assert found is not None and found.id == "search"
    assert ring.find("sk-llmop-other") is None
    assert ring.find(DIGEST) is None  # the stored digest is not itself a key


def test_a_disabled_key_is_refused_like_an_unknown_one() -> None:
    ring = parse_keyring({"keys": [{"id": "old", "sha256": DIGEST, "disabled": True}]})
    assert ring.find("sk-llmop-test") is None


def test_new_keys_are_random_and_recognisable() -> None:
    first, second = new_key(), new_key()
    assert first != second and first.startswith(KEY_PREFIX) and len(first) > 40
    assert digest(first + "\n") == digest(first)  # a trailing newline from a file is ignored


@pytest.mark.parametrize(("data", "message"), [
    ({"keys": [{"id": "a", "sha256": "abc"}]}, "keys.0.sha256: String should match pattern"),
    ({"keys": [{"id": "a", "sha256": DIGEST, "rpm": 5}]}, "keys.0.rpm: unknown field"),
    ({"keys": [{"id": "a", "sha256": DIGEST}, {"id": "a", "sha256": digest("x")}]},
     "id 'a' is used twice"),
    ({"keys": [{"id": "a", "sha256": DIGEST}, {"id": "b", "sha256": DIGEST}]},
     "keys[1] (b): the same key as an earlier entry"),
    ({"keys": [{"id": "a", "sha256": DIGEST, "budget": {"usd": 0}}]},
     "keys.0.budget.usd: Input should be greater than 0"),
    ({"keys": [{"id": "a", "sha256": DIGEST, "budget": {"usd": 5, "period": "year"}}]},
     "keys.0.budget.period: Input should be 'day', 'week', 'month' or 'total'"),
    ({"keys": [{"id": "has space", "sha256": DIGEST}]}, "keys.0.id: String should match"),
])
def test_an_invalid_keys_file_names_the_field(data: object, message: str) -> None:
    with pytest.raises(KeyringError) as err:
        parse_keyring(data, "keys.yaml")
    assert message in str(err.value) and str(err.value).startswith("keys.yaml: ")


def test_an_empty_file_is_a_keyring_that_admits_nobody() -> None:
    assert parse_keyring(None).find("anything") is None


@pytest.mark.parametrize(("models", "tools", "model", "tool", "use", "call"), [
    (None, None, "gpt-5.5", "gpt55", True, True),
    (("gpt-*",), None, "gpt-5.5", "gpt55", True, True),
    (("gpt-*",), None, "claude-opus-4.7", "claude", False, False),
    (("gpt-*",), ("claude",), "claude-opus-4.7", "claude", False, True),  # tools wins for MCP
    ((), None, "gpt-5.5", "gpt55", False, False),
    (("GPT-*",), None, "gpt-5.5", "gpt55", False, False),  # case matters, like model ids
])
def test_allow_lists_are_globs(models: tuple[str, ...] | None, tools: tuple[str, ...] | None,
                               model: str, tool: str, use: bool, call: bool) -> None:
    key = ClientKey(id="k", sha256=DIGEST, models=models, tools=tools)
    assert key.may_use(model) is use
    assert key.may_call(tool, model) is call


UTC = dt.UTC


@pytest.mark.parametrize(("period", "now", "name", "renews"), [
    ("day", dt.datetime(2026, 11, 23, 13, 5, tzinfo=UTC), "2026-11-23",
     dt.datetime(2026, 11, 24, tzinfo=UTC)),
    ("week", dt.datetime(2026, 11, 23, 13, 5, tzinfo=UTC), "2026-W48",
     dt.datetime(2026, 11, 30, tzinfo=UTC)),
    ("week", dt.datetime(2027, 1, 1, tzinfo=UTC), "2026-W53",
     dt.datetime(2027, 1, 4, tzinfo=UTC)),
    ("month", dt.datetime(2026, 12, 31, 23, 59, tzinfo=UTC), "2026-12",
     dt.datetime(2027, 1, 1, tzinfo=UTC)),
    ("month", dt.datetime(2026, 2, 3, tzinfo=UTC), "2026-02",
     dt.datetime(2026, 3, 1, tzinfo=UTC)),
    # 23:30 on the 30th in UTC-2 is already December in UTC: periods are UTC.
    ("month", dt.datetime(2026, 11, 30, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-2))),
     "2026-12", dt.datetime(2027, 1, 1, tzinfo=UTC)),
    ("total", dt.datetime(2026, 11, 23, tzinfo=UTC), "total", None),
])
def test_budget_periods_are_utc_calendar_periods(period: str, now: dt.datetime, name: str,
                                                 renews: dt.datetime | None) -> None:
    assert period_of(period, now) == (name, renews)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_limits_are_taken_from_every_party_or_from_none() -> None:
    clock = Clock()
    route = Limits("route 'gpt'", TokenBucket(100, clock), TokenBucket(1000, clock))
    key = Limits("key 'search'", TokenBucket(1, clock))
    body = {"messages": [{"content": "x" * 40}], "max_tokens": 90}  # 10 + 90 tokens
    first = Reservation()
    assert admit([route, key], body, first) is None
    assert [units for _, units in first.taken] == [100.0]
    refused = admit([route, key], body, Reservation())
    assert refused is not None and refused[0] is key and refused[1] == pytest.approx(60)
    # The key refused it, so the route's allowance was left alone.
    assert route.rpm is not None and route.rpm.wait_seconds(99) == 0
    assert route.tpm is not None and route.tpm.wait_seconds(900) == 0
    first.settle(20)  # the answer used 20 tokens: 80 of the 100 come back
    assert route.tpm.wait_seconds(980) == 0
