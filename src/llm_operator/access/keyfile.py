"""The keys file on disk (a mounted Secret): re-read when it changes, last good kept."""

from __future__ import annotations

import logging
from pathlib import Path

import yaml

from llm_operator.access.keyring import Keyring, KeyringError, parse_keyring

log = logging.getLogger(__name__)


def load_keyring(path: Path) -> Keyring:
    """Read and validate the file; KeyringError names what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise KeyringError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise KeyringError(f"{where}: not valid YAML") from None
    return parse_keyring(data, str(path))


class KeyringSource:
    """The keyring of a file, checked for changes (mtime, size, inode) on each use.

    A rotated Secret applies without a restart; a file that becomes unreadable or invalid
    keeps the last good keyring in force and says why in ``problem`` and the log (once).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.problem: str | None = None
        self._stamp = self._stat()
        self.keyring = load_keyring(path)  # the first read must succeed: refuse to start

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def apply(self, keyring: Keyring) -> None:
        """Keys just written where this file comes from, in force before it is updated.

        The console's administrator wrote them to the Secret this file is mounted from.
        """
        self.keyring, self.problem = keyring, None
        log.info("client keys: %d applied as written", len(keyring.keys))

    def current(self) -> Keyring:
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self.keyring = load_keyring(self.path)
            except KeyringError as exc:
                self.problem = f"{exc}; the previous keys stay in force"
                log.error("client keys: %s", self.problem)
            else:
                if self.problem is not None:
                    log.info("client keys: %s is valid again", self.path)
                self.problem = None
                log.info("client keys: loaded %d from %s", len(self.keyring.keys), self.path)
        return self.keyring
