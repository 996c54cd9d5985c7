"""Upstream API keys from a file (re-read when it changes) or an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

from llm_operator.gateway.settings.config import ApiKeySource


class KeyUnavailable(RuntimeError):
    """The key cannot be read; the message names the source, never the key."""


class KeySource:
    """Reads a key lazily.

    A file is re-read whenever its mtime or size changes, so a rotated Kubernetes Secret
    takes effect without a restart.
    """

    def __init__(self, source: ApiKeySource) -> None:
        self._source = source
        self._file = source.file or ""  # a str: os.stat on it costs a fifth of Path.stat()
        self._cached: str | None = None
        self._stamp: tuple[int, int, int] | None = None

    @property
    def description(self) -> str:
        return f"file {self._source.file}" if self._source.file else f"env ${self._source.env}"

    def get(self) -> str:
        if self._source.env is not None:
            value = os.environ.get(self._source.env, "").strip()
            if not value:
                raise KeyUnavailable(f"API key {self.description} is not set")
            return self._one_line(value)
        try:  # every request: a rotated Secret applies at once (its inode changes)
            stat = os.stat(self._file)
        except OSError as exc:
            raise KeyUnavailable(f"API key {self.description} is unreadable: "
                                 f"{exc.strerror}") from None
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        if stamp != self._stamp or self._cached is None:
            value = Path(self._file).read_text(encoding="utf-8").strip()
            if not value:
                raise KeyUnavailable(f"API key {self.description} is empty")
            self._cached, self._stamp = self._one_line(value), stamp
        return self._cached

    def _one_line(self, value: str) -> str:
        """The key, unless a line break inside it would split the upstream request."""
        if "\n" in value or "\r" in value:
            raise KeyUnavailable(f"API key {self.description} has a line break inside it; "
                                 "store the key alone")
        return value
