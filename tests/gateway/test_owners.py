"""Which router replica holds a model's queue: one owner per pool, spread, and stable."""

from __future__ import annotations

import pytest

from llm_operator.gateway.routing.owners import Owners

REPLICAS = {f"router-{i}": f"http://10.0.0.{i}:8080" for i in range(3)}
POOLS = [f"ns/model-{i}" for i in range(60)]


def owner_names(replicas: dict[str, str], me: str = "elsewhere") -> dict[str, str]:
    owners = Owners(me)
    owners.update(replicas)
    by_url = {url: name for name, url in replicas.items()}
    return {pool: by_url[url] for pool in POOLS if (url := owners.owner(pool)) is not None}


def test_every_replica_agrees_on_one_owner_per_pool() -> None:
    views = []
    for me, url in REPLICAS.items():
        owners = Owners(me)
        owners.update(REPLICAS)
        views.append({pool: owners.owner(pool) or url for pool in POOLS})
    assert views[0] == views[1] == views[2]


def test_the_pools_spread_over_the_replicas() -> None:
    counts = {name: 0 for name in REPLICAS}
    for name in owner_names(REPLICAS).values():
        counts[name] += 1
    assert min(counts.values()) >= 10, counts  # 60 pools over 3 replicas


def test_a_replica_that_goes_moves_only_its_own_pools() -> None:
    before = owner_names(REPLICAS)
    after = owner_names({k: v for k, v in REPLICAS.items() if k != "router-1"})
    moved = {pool for pool in POOLS if before[pool] != after[pool]}
    assert moved == {pool for pool in POOLS if before[pool] == "router-1"}


@pytest.mark.parametrize(("replicas", "expected"), [
    ({"me": "http://10.0.0.9:8080"}, None),  # the only ready replica
    ({}, None),  # none known ready (its Service not read yet): it serves
    ({"other": "http://10.0.0.2:8080"}, "http://10.0.0.2:8080"),  # not ready itself
], ids=["alone", "none-known", "not-ready-itself"])
def test_who_serves_a_pool(replicas: dict[str, str], expected: str | None) -> None:
    owners = Owners("me")
    owners.update(replicas)
    assert owners.owner("ns/m") == expected


def test_a_change_of_replicas_is_seen_at_once() -> None:
    owners = Owners("me")
    owners.update({"other": "http://10.0.0.2:8080"})
    assert owners.owner("ns/m") == "http://10.0.0.2:8080"
    assert owners.update({"me": "http://10.0.0.1:8080"}) is True
    assert owners.owner("ns/m") is None
    assert owners.update({"me": "http://10.0.0.1:8080"}) is False


@pytest.mark.parametrize(("host", "passed", "here"), [
    ("10.0.0.2", "router-2", True),  # a ready replica passed it on
    ("fd00::3", None, False),  # no header: the owner serves it
    ("10.9.9.9", "router-2", False),  # a client setting the header: not a replica
    (None, "router-2", False),
    ("10.9.9.9", "a,b,c", True),  # three replicas passed it on: their views disagree
], ids=["peer", "no-header", "spoofed", "no-address", "passed-three-times"])
def test_which_requests_are_served_where_they_land(
        host: str | None, passed: str | None, here: bool) -> None:
    owners = Owners("me")
    owners.update({"router-2": "http://10.0.0.2:8080", "router-3": "http://[fd00::3]:8080"})
    assert owners.serves_here(host, passed) is here


def test_an_ipv6_replica_is_known_by_its_address() -> None:
    owners = Owners("me")
    owners.update({"router-3": "http://[fd00::3]:8080"})
    assert owners.serves_here("fd00::3", "router-3")
