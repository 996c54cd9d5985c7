"""Which egress proxy an upstream call goes through: HTTPS_PROXY, HTTP_PROXY and NO_PROXY.

Read as curl and Go read them: the lowercase name wins over the uppercase one; NO_PROXY
lists host names (a name matches itself and its subdomains; a leading ``.`` or ``*.`` is
ignored), IP addresses and CIDR ranges, each optionally with ``:port``, or ``*`` for
everything. Loopback upstreams (``localhost``, 127.0.0.0/8, ::1) never go through a proxy,
as in Go, so ``llmop up`` keeps reaching its local engines on a laptop behind one.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit


class ProxyError(ValueError):
    """A proxy variable the gateway cannot use; the message names it, never its password."""


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy: where it listens and the Proxy-Authorization it wants, if any."""

    host: str
    port: int
    authorization: str | None = None

    @property
    def label(self) -> str:
        """host:port, for messages (never the credentials)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_proxy(name: str, value: str) -> Proxy:
    """A proxy URL (``http://user:pass@proxy:3128``; a bare ``proxy:3128`` is http).

    ProxyError for another scheme (https:// and socks proxies are not spoken).
    """
    parts = urlsplit(value if "://" in value else f"http://{value}")
    if parts.scheme != "http" or not parts.hostname:
        raise ProxyError(f"{name}: the gateway speaks to proxies over http:// only "
                         f"(scheme {parts.scheme!r}); e.g. http://proxy.corp:3128")
    try:
        port = parts.port or 80
    except ValueError:
        raise ProxyError(f"{name}: the proxy's port is not a number") from None
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(pair.encode()).decode()
    return Proxy(parts.hostname, port, authorization)


def _loopback(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _excluded(entry: str, host: str, port: int) -> bool:
    """Whether one NO_PROXY entry covers ``host:port``."""
    if entry == "*":
        return True
    wanted_port = None
    if entry.count(":") == 1 or (entry.startswith("[") and "]:" in entry):
        entry, _, text = entry.rpartition(":")
        if not text.isdigit():
            return False
        wanted_port = int(text)
    entry = entry.strip("[]")
    if wanted_port is not None and wanted_port != port:
        return False
    try:
        network = ipaddress.ip_network(entry, strict=False)
    except ValueError:
        domain = entry.removeprefix("*").removeprefix(".").lower()
        name = host.lower()
        return bool(domain) and (name == domain or name.endswith(f".{domain}"))
    try:
        return ipaddress.ip_address(host) in network
    except ValueError:
        return False


@dataclass(frozen=True)
class ProxySettings:
    """The proxies for http and https upstreams and the hosts that bypass them."""

    http: Proxy | None = None
    https: Proxy | None = None
    no_proxy: tuple[str, ...] = ()

    def for_target(self, scheme: str, host: str, port: int) -> Proxy | None:
        """The proxy a call to ``scheme://host:port`` goes through, or None (direct)."""
        proxy = self.https if scheme == "https" else self.http
        if proxy is None or _loopback(host.strip("[]")):
            return None
        if any(_excluded(entry, host.strip("[]"), port) for entry in self.no_proxy):
            return None
        return proxy

    def describe(self) -> str | None:
        """One line for the log (no credentials), or None without proxies."""
        if self.http is None and self.https is None:
            return None
        used = [f"{scheme} upstreams through {proxy.label}"
                for scheme, proxy in (("https", self.https), ("http", self.http)) if proxy]
        bypass = f"; not for {', '.join(self.no_proxy)}" if self.no_proxy else ""
        return "; ".join(used) + bypass + " (nor for loopback)"


def _variable(env: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for spelled in (name.lower(), name.upper()):
        value = env.get(spelled, "").strip()
        if value:
            return spelled, value
    return None


def proxy_settings(env: Mapping[str, str]) -> ProxySettings:
    """The settings ``env`` (the process environment) gives; ProxyError if one is unusable."""
    found = {}
    for scheme in ("http", "https"):
        given = _variable(env, f"{scheme}_proxy")  # not ALL_PROXY: often socks, as Go
        found[scheme] = parse_proxy(*given) if given else None
    bypass = _variable(env, "no_proxy")
    entries = tuple(e.strip() for e in bypass[1].split(",") if e.strip()) if bypass else ()
    return ProxySettings(found["http"], found["https"], entries)

