"""`llmop up`'s sockets: listening where the user asked, or saying which option to change."""

from __future__ import annotations

import socket

from llm_operator.local.placement import LOOPBACK


class StartError(RuntimeError):
    """`llmop up` cannot start (a port is taken, the directory is missing); says what to do."""


def listen(port: int, what: str, option: str, host: str = LOOPBACK) -> socket.socket:
    """A listening socket (loopback by default), or StartError naming the option to change."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartError(f"cannot listen on {host}:{port} for the {what}: "
                         f"{exc.strerror or exc}; pass {option} with a free port (0 picks "
                         "one)") from None
    sock.listen(256)
    sock.set_inheritable(False)
    return sock


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port
