"""aiohttp connectors that really close their TLS connections when the client closes."""

from __future__ import annotations

import sys
from typing import Any

import aiohttp

# Before Python 3.12.8 (and in 3.13.0), asyncio waits up to 30 s for the peer's close_notify
# after a graceful TLS close, and loses the socket if its loop ends first (cpython#118960).
# A watch cancelled on shutdown is closed that way; aiohttp can abort such transports when
# its connector closes, but warns (DeprecationWarning) on Pythons that no longer need it.
TLS_CLOSE_NEEDS_CLEANUP = sys.version_info < (3, 12, 8) or \
    (3, 13, 0) <= sys.version_info < (3, 13, 1)


def tcp_connector(**options: Any) -> aiohttp.TCPConnector:
    """A TCPConnector whose close() also ends TLS connections still saying goodbye."""
    return aiohttp.TCPConnector(enable_cleanup_closed=TLS_CLOSE_NEEDS_CLEANUP, **options)
