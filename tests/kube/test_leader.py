"""Leader election: one replica reconciles, another stands by and takes over."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import socket
import threading
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest
import yaml

from llm_operator.kube import Connection, Kube
from llm_operator.leader import LeaderElector, LeaseTerms, holder, lease_body
from llm_operator.operator.run import run_operator
from llm_operator.profiles.settings import Settings

from cluster import Cluster, allowed, needed
from freezing_proxy import FreezingProxy
from operators import connect
from samples import REPO, sample_doc

T0 = datetime(2026, 11, 22, 6, 0, tzinfo=UTC)


def lease(holder_id: str | None, renewed: datetime, duration: int = 15) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": "7"},
            "spec": {"holderIdentity": holder_id, "leaseDurationSeconds": duration,
                     "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                     "acquireTime": T0.isoformat(), "leaseTransitions": 2}}


@pytest.mark.parametrize(("current", "now", "expected"), [
    (None, T0, "absent"),
    (lease("a", T0), T0 + timedelta(seconds=60), "mine"),
    (lease("b", T0), T0 + timedelta(seconds=14), "held"),
    (lease("b", T0), T0 + timedelta(seconds=15), "expired"),
    (lease(None, T0), T0, "expired"),  # released
])
def test_who_holds_the_lease(current: dict[str, Any] | None, now: datetime,
                             expected: str) -> None:
    assert holder(current, "a", now) == expected


def test_taking_over_counts_a_transition_and_renewing_keeps_the_acquire_time() -> None:
    terms = LeaseTerms(namespace="ops", identity="a")
    taken = lease_body(terms, lease("b", T0), T0 + timedelta(seconds=30))
    assert taken["spec"]["leaseTransitions"] == 3
    assert taken["spec"]["acquireTime"] == taken["spec"]["renewTime"]
    assert taken["metadata"]["resourceVersion"] == "7"  # a lost race answers 409
    renewed = lease_body(terms, lease("a", T0), T0 + timedelta(seconds=5))
    assert renewed["spec"]["leaseTransitions"] == 2
    assert renewed["spec"]["acquireTime"] == T0.isoformat()


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_a_standby_takes_over_only_after_the_lease_expires(cluster: Cluster) -> None:
    clock = Clock()
    conn = connect(cluster)
    async with Kube(conn) as kube:
        a = LeaderElector(kube, LeaseTerms(namespace="ops", identity="a"), clock=clock)
        b = LeaderElector(kube, LeaseTerms(namespace="ops", identity="b"), clock=clock)
        assert await a.try_acquire()
        assert not await b.try_acquire()
        clock.now += timedelta(seconds=10)
        assert await a.try_acquire()  # a renews
        clock.now += timedelta(seconds=14)
        assert not await b.try_acquire()  # 14 s after the renewal: still a's
        clock.now += timedelta(seconds=1)
        assert await b.try_acquire()
        assert not await a.try_acquire()  # a learns it lost
    spec = cluster.get("coordination.k8s.io/v1", "leases", "ops", "llm-operator")["spec"]
    assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1


async def test_two_replicas_racing_for_a_free_lease_get_one_winner(cluster: Cluster) -> None:
    conn = connect(cluster)
    async with Kube(conn) as kube:
        electors = [LeaderElector(kube, LeaseTerms(namespace="ops", identity=i))
                    for i in ("a", "b", "c")]
        won = await asyncio.gather(*(e.try_acquire() for e in electors))
    assert sorted(won) == [False, False, True]


async def test_the_leader_stops_when_it_cannot_renew(cluster: Cluster) -> None:
    clock = Clock()

    async def tick(seconds: float) -> None:
        clock.now += timedelta(seconds=seconds)
        await asyncio.sleep(0)

    conn = connect(cluster)
    async with Kube(conn, attempts=1) as kube:
        elector = LeaderElector(kube, LeaseTerms(namespace="ops", identity="a"), clock=clock,
                                sleep=tick)
        assert await elector.try_acquire()
        cluster.fail("fetch", "leases", 500, times=100)
        await asyncio.wait_for(elector.hold(), 10)
    assert elector.lost.is_set()
    assert clock.now - T0 >= timedelta(seconds=10)  # it kept trying for the renew deadline


class RacingLeases:
    """A Lease API whose renewals end just as their caller is cancelled (``stopping``)."""

    def __init__(self) -> None:
        self.stopping: asyncio.Task[None] | None = None
        self.writes = 0

    async def get(self, *_: Any) -> dict[str, Any]:
        return lease("a", T0)

    async def request(self, _method: str, _path: str, body: Any = None, **_: Any) -> Any:
        self.writes += 1
        if self.stopping is not None:  # the cancel lands before the caller resumes
            asyncio.get_running_loop().call_soon(self.stopping.cancel)
        return body


async def test_a_leader_told_to_stop_stops_even_when_a_renewal_ends_that_instant() -> None:
    """Python 3.11's wait_for swallowed such a cancel: the elector renewed for ever."""
    leases = RacingLeases()

    async def no_wait(_: float) -> None:
        await asyncio.sleep(0)

    elector = LeaderElector(leases, LeaseTerms(namespace="ops", identity="a"),  # type: ignore[arg-type]
                            clock=Clock(), sleep=no_wait)
    assert await elector.try_acquire()
    holding = asyncio.create_task(elector.hold())
    leases.stopping = holding
    done, _ = await asyncio.wait({holding}, timeout=5)
    assert done and holding.cancelled(), f"still renewing after {leases.writes} writes"
    assert leases.writes == 2  # the first acquire, and the renewal the stop met


class Replica:
    """An operator replica with leader election in its own thread and event loop.

    Separate loops keep the replicas apart as separate pods are: nothing one replica
    starts or cancels can touch the other.
    """

    def __init__(self, cluster: Cluster, identity: str, liveness: str | None = None) -> None:
        self._liveness = liveness
        self.ready = threading.Event()
        self.done = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._terms = LeaseTerms(namespace="llm-operator-system", identity=identity,
                                 retry=0.05)
        self._conn = connect(cluster)
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait(10)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        ready = asyncio.Event()

        async def signal_ready() -> None:
            await ready.wait()
            self.ready.set()

        watcher = asyncio.create_task(signal_ready())
        self._started.set()
        try:
            await run_operator(self._conn, Settings(), stop=self._stop, ready=ready,
                               resync_seconds=3600, leader=self._terms,
                               liveness=self._liveness)
        finally:
            watcher.cancel()
            self.done.set()

    async def stop(self) -> None:
        assert self._loop is not None and self._stop is not None
        if self.done.is_set():
            return
        self._loop.call_soon_threadsafe(self._stop.set)
        await asyncio.to_thread(self.done.wait, 30)


@contextlib.asynccontextmanager
async def replica(cluster: Cluster, identity: str, liveness: str | None = None
                  ) -> AsyncIterator[Replica]:
    running = Replica(cluster, identity, liveness)
    try:
        yield running
    finally:
        await running.stop()


async def test_only_the_leader_reconciles_and_the_standby_takes_over(cluster: Cluster) -> None:
    conn = connect(cluster)
    async with Kube(conn) as kube, replica(cluster, "a") as a:
        assert await asyncio.to_thread(a.ready.wait, 10)
        probe = f"http://127.0.0.1:{free_port()}/healthz"
        async with replica(cluster, "b", probe) as b:
            await kube.request("POST", "/apis/ai.example.io/v1alpha1/namespaces/ai-models/"
                               "llmmodels", body=copy.deepcopy(sample_doc("qwen35-9b-cpu")))
            await cluster.until(lambda: "status" in (cluster.get(
                "ai.example.io/v1alpha1", "llmmodels", "ai-models", "qwen35-9b-cpu") or {}))
            assert not b.ready.is_set()  # standing by, and alive for the kubelet's probes
            assert await probe_status(probe) == (200, {"status": "standby"})
            held = cluster.get("coordination.k8s.io/v1", "leases", "llm-operator-system",
                               "llm-operator")
            assert held is not None and held["spec"]["holderIdentity"] == "a"
            await a.stop()  # a stops cleanly and hands the lease over; b starts working
            assert await asyncio.to_thread(b.ready.wait, 10)
            held = cluster.get("coordination.k8s.io/v1", "leases", "llm-operator-system",
                               "llm-operator")
            assert held is not None and held["spec"]["holderIdentity"] == "b"
            assert held["spec"]["leaseTransitions"] == 1
            assert await probe_status(probe) == (200, {"status": "ok"})


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def probe_status(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        return r.status, await r.json(content_type=None)


async def test_the_leader_election_role_allows_every_lease_request(cluster: Cluster) -> None:
    conn = connect(cluster)
    async with Kube(conn) as kube:
        elector = LeaderElector(kube, LeaseTerms(namespace="llm-operator-system",
                                                 identity="a"))
        assert await elector.try_acquire()  # create
        assert await elector.try_acquire()  # renew
        await elector.release()
    role = yaml.safe_load_all((REPO / "config/rbac/leader_election_role.yaml").read_text())
    rules = next(d for d in role if d["kind"] == "Role")["rules"]
    used = needed(cluster)
    assert used == {("coordination.k8s.io", "leases", v) for v in ("get", "create", "update")}
    assert all(allowed(rules, *n) for n in used)


async def probe_says(url: str) -> str | None:
    """What the replica's liveness probe answers (None: it does not listen yet)."""
    try:
        return str((await probe_status(url))[1]["status"])
    except aiohttp.ClientConnectionError:
        return None


async def probe_until(url: str, wanted: str, timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while await probe_says(url) != wanted:
            await asyncio.sleep(0.05)


async def test_a_frozen_api_server_costs_no_restart_and_never_two_leaders(
        cluster: Cluster) -> None:
    """#35: one operator pod restarted when the API server froze for 25 s. A leader that
    cannot renew within the renew deadline (each attempt bounded by it, so a hanging
    request cannot keep it working past the Lease) stops its controller and stands by again
    in the same process; the standby waits the freeze out. Nothing exits."""
    terms = {"namespace": "llm-operator-system", "retry": 0.05, "renew_deadline": 0.6,
             "duration": 1.0}
    async with FreezingProxy.to_url(str(connect(cluster).server)) as proxy:
        conn = Connection(server=proxy.url)
        probes = {i: f"http://127.0.0.1:{free_port()}/healthz" for i in ("a", "b")}
        stop = asyncio.Event()
        replicas = {}
        for identity in ("a", "b"):
            replicas[identity] = asyncio.create_task(run_operator(
                conn, Settings(), stop=stop, resync_seconds=3600, liveness=probes[identity],
                leader=LeaseTerms(identity=identity, **terms)))  # type: ignore[arg-type]
            if identity == "a":
                await probe_until(probes["a"], "ok")  # a leads, b stands by
        await probe_until(probes["b"], "standby")
        proxy.thawed.clear()  # frozen
        await probe_until(probes["a"], "standby")  # a stepped down within its deadline
        assert await probe_says(probes["b"]) == "standby"
        proxy.thawed.set()
        async with asyncio.timeout(20):  # one of them leads again, and only one
            while sorted([str(await probe_says(p)) for p in probes.values()]) \
                    != ["ok", "standby"]:
                await asyncio.sleep(0.05)
        assert not any(task.done() for task in replicas.values())  # neither process exited
        stop.set()
        await asyncio.wait_for(asyncio.gather(*replicas.values()), 30)
