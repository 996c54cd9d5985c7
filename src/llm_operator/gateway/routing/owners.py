"""Which router replica holds each model's queue: rendezvous hashing over the ready replicas.

Flow control orders one model's requests by band and fairness ID, and that order holds only
where the requests wait together. With several router replicas each held its own queue and
1/N of the slots: a slot freed by one replica's request went to that replica's next
request, whatever waited on the other, and a light client there waited behind a heavy one
here (docs/benchmarks.md, "Two router replicas"). So each model's flow-controlled requests
wait on one replica, its *owner*: the others pass them on whole (gateway/path/parts/owner.py),
the way the Gateway API Inference Extension keeps flow control in one active endpoint
picker. Each model's owner is the ready replica whose hash with the model's pool name is
highest, so the models spread over the replicas and a replica that goes or comes moves
only its own share of them. Pure: the router feeds in its Service's ready endpoints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from urllib.parse import urlsplit

PEER_HEADER = "x-llmop-router-peer"  # on a request one replica passed to its owner
# replicas a request may pass through while their views of who is ready disagree
MAX_PASSES = 3


def _score(replica: str, pool: str) -> bytes:
    return hashlib.blake2b(f"{replica}\0{pool}".encode(), digest_size=8).digest()


class Owners:
    """The ready replicas (name: base URL) and which of them owns each pool.

    ``me`` is this replica's name (its pod's). ``owner`` answers None when this replica
    serves the pool itself: it owns it, or no replica is known to be ready.
    """

    def __init__(self, me: str) -> None:
        self.me = me
        self.replicas: dict[str, str] = {}
        self._hosts: frozenset[str] = frozenset()
        self._owners: dict[str, str | None] = {}

    def update(self, replicas: Mapping[str, str]) -> bool:
        """The ready replicas now ({pod name: base URL}); whether they changed."""
        if dict(replicas) == self.replicas:
            return False
        self.replicas = dict(replicas)
        self._hosts = frozenset(host for url in self.replicas.values()
                                if (host := urlsplit(url).hostname) is not None)
        self._owners.clear()
        return True

    def owner(self, pool: str) -> str | None:
        """The base URL of the replica owning ``pool``; None: this one serves it."""
        try:
            return self._owners[pool]
        except KeyError:
            pass
        found: str | None = None
        if self.replicas:
            name = max(self.replicas, key=lambda replica: _score(replica, pool))
            found = None if name == self.me else self.replicas[name]
        self._owners[pool] = found
        return found

    def passes_to(self, pool: str, host: str | None, passed: str | None) -> str | None:
        """Where a request for ``pool`` goes: the owner's base URL, or None (served here).

        ``host`` sent it, with PEER_HEADER ``passed`` (see ``serves_here``).
        """
        owner = self.owner(pool)
        return None if owner is None or self.serves_here(host, passed) else owner

    def serves_here(self, host: str | None, passed: str | None) -> bool:
        """Whether a request that came from ``host`` serves here, whoever owns its pool.

        ``passed``: its PEER_HEADER (the replicas that passed it on, comma-separated). A
        request another ready replica passed on is served here: only they may skip the
        owner (a client setting the header gets no way around its queue). One that passed
        MAX_PASSES replicas is served here too (their views of who is ready disagree).
        """
        if passed is None:
            return False
        return (host is not None and host in self._hosts) or \
            passed.count(",") + 1 >= MAX_PASSES

