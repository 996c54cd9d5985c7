"""Leader election on a coordination.k8s.io Lease: one active holder among replicas.

The operator's replicas elect one to reconcile; the router's, one to run batches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from llm_operator.kube import ApiError, Kube, path_of

log = logging.getLogger(__name__)
API, PLURAL = "coordination.k8s.io/v1", "leases"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # MicroTime


@dataclass(frozen=True)
class LeaseTerms:
    """Which Lease, who we are, and the timings (client-go's defaults: 15 s / 10 s / 2 s)."""

    namespace: str
    identity: str
    name: str = "llm-operator"
    duration: float = 15.0  # a holder that has not renewed for this long has lost the lease
    renew_deadline: float = 10.0  # the leader stops if it could not renew for this long
    retry: float = 2.0  # between attempts to acquire or renew


def _time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


Holder = Literal["absent", "mine", "expired", "held"]


def holder(lease: dict[str, Any] | None, identity: str, now: datetime) -> Holder:
    """Who holds the lease right now, from our point of view."""
    if lease is None:
        return "absent"
    spec = lease.get("spec") or {}
    current = spec.get("holderIdentity")
    if current == identity:
        return "mine"
    renewed = _time(spec.get("renewTime")) or _time(spec.get("acquireTime"))
    duration = float(spec.get("leaseDurationSeconds") or 0)
    if not current or renewed is None or renewed + timedelta(seconds=duration) <= now:
        return "expired"
    return "held"


def lease_body(terms: LeaseTerms, previous: dict[str, Any] | None, now: datetime
               ) -> dict[str, Any]:
    """The Lease naming us holder; carries the previous resourceVersion (a lost race is a 409)."""
    stamp = now.strftime(TIME_FORMAT)
    spec_before = (previous or {}).get("spec") or {}
    taking_over = spec_before.get("holderIdentity") != terms.identity
    transitions = int(spec_before.get("leaseTransitions") or 0)
    metadata: dict[str, Any] = {"name": terms.name, "namespace": terms.namespace}
    if previous is not None:
        metadata["resourceVersion"] = previous["metadata"]["resourceVersion"]
    return {
        "apiVersion": API, "kind": "Lease", "metadata": metadata,
        "spec": {"holderIdentity": terms.identity,
                 "leaseDurationSeconds": int(terms.duration),
                 "acquireTime": stamp if taking_over else spec_before.get("acquireTime", stamp),
                 "renewTime": stamp,
                 "leaseTransitions": transitions + (1 if taking_over and previous else 0)}}


def _now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Acquire, renew and release one Lease; the caller stops working when it is lost."""

    def __init__(self, kube: Kube, terms: LeaseTerms, *,
                 clock: Callable[[], datetime] = _now,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.kube, self.terms, self._clock, self._sleep = kube, terms, clock, sleep
        self._path = path_of(API, PLURAL, terms.namespace, terms.name)
        self._last_renewed: datetime | None = None
        self.lost = asyncio.Event()

    async def try_acquire(self) -> bool:
        """One attempt to become (or stay) the holder; False when someone else holds it."""
        now = self._clock()
        try:
            lease = await self.kube.get(API, PLURAL, self.terms.namespace, self.terms.name)
            state = holder(lease, self.terms.identity, now)
            if state == "held":
                return False
            body = lease_body(self.terms, lease, now)
            if state == "absent":
                await self.kube.request("POST", path_of(API, PLURAL, self.terms.namespace),
                                        body=body)
            else:
                await self.kube.request("PUT", self._path, body=body)
        except ApiError as exc:
            if exc.status == 409:  # another replica won the race
                return False
            raise
        if state != "mine":
            log.info("became the leader (Lease %s/%s, identity %s)", self.terms.namespace,
                     self.terms.name, self.terms.identity)
        self._last_renewed = now
        return True

    async def _attempt(self, seconds: float) -> bool:
        """``try_acquire`` within ``seconds`` (TimeoutError past them).

        asyncio.timeout, not wait_for: Python 3.11's wait_for returns the inner call's
        result when the call finished just as the caller was cancelled, and so swallows
        the cancel. A router told to stop then renewed its batch Lease ten times a second
        for ever, and no standby could take it (tests/router/test_router_batches.py).
        """
        async with asyncio.timeout(seconds):
            return await self.try_acquire()

    async def acquire(self) -> None:
        """Wait until we hold the lease; whatever the API server does, a standby waits on.

        Each attempt is bounded by the lease duration, so a frozen API server (requests
        that hang) costs a standby nothing but time.
        """
        waiting_logged = False
        while True:
            try:
                if await self._attempt(self.terms.duration):
                    return
            except Exception as exc:
                log.warning("could not read or write the Lease (%s: %s); retrying",
                            type(exc).__name__, exc)
            if not waiting_logged:
                log.info("another replica leads; standing by (Lease %s/%s)",
                         self.terms.namespace, self.terms.name)
                waiting_logged = True
            await self._sleep(self.terms.retry)

    async def hold(self) -> None:
        """Renew until it fails for ``renew_deadline``; then set ``lost`` and return.

        Each attempt is bounded by what is left of the renew deadline (as client-go's is):
        a request that hangs on a frozen API server must not keep a leader working past
        the moment a standby may take the Lease (``duration`` after the last renewal).
        """
        while True:
            await self._sleep(self.terms.retry)
            assert self._last_renewed is not None
            left = self.terms.renew_deadline - (
                self._clock() - self._last_renewed).total_seconds()
            try:
                if await self._attempt(max(left, 0.001)):
                    continue
                log.error("the Lease was taken by another replica; stepping down")
            except Exception as exc:
                late = (self._clock() - self._last_renewed).total_seconds()
                if late < self.terms.renew_deadline:
                    log.warning("could not renew the Lease (%s: %s); retrying",
                                type(exc).__name__, exc)
                    continue
                log.error("could not renew the Lease for %.0f s (%s); stepping down", late,
                          type(exc).__name__)
            self.lost.set()
            return

    async def release(self) -> None:
        """Hand the lease back at shutdown, so a standby replica takes over at once."""
        try:
            lease = await self.kube.get(API, PLURAL, self.terms.namespace, self.terms.name)
            if lease is None or holder(lease, self.terms.identity, self._clock()) != "mine":
                return
            body = lease_body(self.terms, lease, self._clock())
            body["spec"]["holderIdentity"] = None
            body["spec"]["leaseDurationSeconds"] = 1
            await self.kube.request("PUT", self._path, body=body)
            log.info("released the Lease")
        except (ApiError, OSError) as exc:
            log.warning("could not release the Lease (%s); it expires by itself", exc)
