"""The console's admin credential: a token in a file (a mounted Secret), compared safely."""

from __future__ import annotations

import hmac
import logging
from pathlib import Path

log = logging.getLogger(__name__)
SHORTEST = 16  # characters: a token shorter than this is refused at start


class AdminTokenError(ValueError):
    """The token file cannot be used (the message never holds the token)."""


class AdminToken:
    """The token in ``path``, re-read when the file changes (a rotated Secret applies).

    A file that becomes unreadable or empty admits nobody until it is fixed.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = b""
        self._load()
        if not self._token:
            raise AdminTokenError(f"{path}: cannot read an admin token from it")
        if len(self._token) < SHORTEST:
            raise AdminTokenError(f"{path}: the admin token is shorter than {SHORTEST} "
                                  "characters; make one with `openssl rand -hex 32`")

    def _load(self) -> None:
        try:
            stat = self.path.stat()
            stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
            if stamp == self._stamp:
                return
            self._token = self.path.read_bytes().strip()
            self._stamp = stamp
        except OSError as exc:
            if self._token:
                log.error("admin token file %s: %s; admitting no administrator", self.path,
                          exc.strerror or exc)
            self._token, self._stamp = b"", None

    def matches(self, given: str | None) -> bool:
        self._load()
        if not given or not self._token:
            return False
        return hmac.compare_digest(given.strip().encode(), self._token)
