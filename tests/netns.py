"""Test hosts on one machine: network namespaces, alone or joined by a veth pair like pods.

Each host has its own loopback and ports, an address on the link and a default route
through it, as a pod has on its network: a program that finds its own address by the route
out (Ray does) finds the host's. The link bypasses the machine's own namespace, so the test
node's iptables rules never see the traffic. Needs root (`ip netns`), as the real node does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

SUBNET = "10.213.0"  # an address range neither this machine nor the test node uses


@dataclass(frozen=True)
class Host:
    """One namespace: its name for `ip netns exec`, and its address on the link."""

    netns: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """`argv`, run inside this host."""
        return ["ip", "netns", "exec", self.netns, *argv]


def missing() -> str | None:
    """Why hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` (Debian's iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _kill_all(host: Host) -> None:
    """Every process left in the host: daemons a test started detach from its children."""
    pids = subprocess.run(["ip", "netns", "pids", host.netns], check=False,
                          capture_output=True, text=True).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


@contextlib.contextmanager
def host_pair() -> Iterator[tuple[Host, Host]]:
    """Two hosts on one link; removed on exit with every process still running in them."""
    prefix = f"llmop{os.getpid() % 100000}"
    pair = (Host(f"{prefix}a", f"{SUBNET}.1"), Host(f"{prefix}b", f"{SUBNET}.2"))
    try:
        for host in pair:
            _ip("netns", "add", host.netns)
            _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("link", "add", f"{prefix}va", "netns", pair[0].netns, "type", "veth",
            "peer", "name", f"{prefix}vb", "netns", pair[1].netns)
        for host, link in zip(pair, ("va", "vb"), strict=True):
            _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", prefix + link)
            _ip("-n", host.netns, "link", "set", prefix + link, "up")
            _ip("-n", host.netns, "route", "add", "default", "dev", prefix + link)
        yield pair
    finally:
        for host in pair:
            _kill_all(host)
            subprocess.run(["ip", "netns", "del", host.netns], check=False, capture_output=True)


@contextlib.contextmanager
def lone_host() -> Iterator[Host]:
    """A host with its own loopback only: every port free, as on a new machine; removed on
    exit with every process still running in it."""
    host = Host(f"llmop{os.getpid() % 100000}l", "127.0.0.1")
    try:
        _ip("netns", "add", host.netns)
        _ip("-n", host.netns, "link", "set", "lo", "up")
        yield host
    finally:
        _kill_all(host)
        subprocess.run(["ip", "netns", "del", host.netns], check=False, capture_output=True)
