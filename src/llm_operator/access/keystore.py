"""Where the web console writes client keys: a store read and written whole, never blindly.

A store (a keys file here, a Secret in the router) answers its document with a version;
a write names the version it read and is refused (``StaleKeys``) when the store changed
since, so two administrators never lose each other's edits: ``change`` reads again and
applies the edit again. Only digests are written; a key is never in a store.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import yaml

from llm_operator.access.keyring import Keyring, KeyringError, parse_keyring

HEADER = ("# Client keys: SHA-256 digests, never the keys (llmop keys new, or the web "
          "console's Keys page).\n")
T = TypeVar("T")


class StaleKeys(Exception):
    """The store changed since it was read: read again."""


class KeyStore(Protocol):
    """A keys document, read and written whole."""

    where: str  # for messages: "the file /etc/...", "Secret ns/name"

    async def read(self) -> tuple[object, str]:
        """(the document as YAML's data, its version); KeyringError when unreadable."""
        ...

    async def write(self, document: dict[str, Any], version: str) -> None:
        """Replace the document read at ``version``.

        StaleKeys if it changed since; KeyringError when it cannot be written, saying why.
        """
        ...


def document_text(document: dict[str, Any]) -> str:
    return HEADER + yaml.safe_dump(document, sort_keys=False)


def parse_document(text: str, where: str) -> object:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise KeyringError(f"{where}: not valid YAML") from None


async def change(store: KeyStore, edit: Callable[[object], tuple[dict[str, Any], T]],
                 attempts: int = 3) -> tuple[Keyring, T]:
    """Apply ``edit`` (document -> (new document, result)) to the store's latest document.

    Returns the keyring written and the edit's result; KeyringError when the edit or the
    store refuses, naming what to fix.
    """
    for _ in range(attempts):
        data, version = await store.read()
        document, result = edit(data)
        try:
            await store.write(document, version)
        except StaleKeys:
            continue
        return parse_keyring(document, store.where), result
    raise KeyringError(f"{store.where} kept changing while it was written; try again")


class FileKeyStore:
    """A keys file on this machine (the one ``clientKeys.file`` names).

    Written to a new file beside it, then renamed over it, with the old file's mode: a
    reader (the gateway re-reads it when it changes) sees the old or the new keys, never
    half. A file mounted from a Secret is read-only: the router writes the Secret instead.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.where = f"the keys file {path}"
        self._lock = asyncio.Lock()

    def _text(self) -> str:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ""
        except OSError as exc:
            raise KeyringError(f"{self.where}: cannot read: {exc.strerror or exc}") from None

    async def read(self) -> tuple[object, str]:
        text = await asyncio.to_thread(self._text)
        return parse_document(text, self.where), hashlib.sha256(text.encode()).hexdigest()

    def _replace(self, text: str, version: str) -> None:
        if hashlib.sha256(self._text().encode()).hexdigest() != version:
            raise StaleKeys
        try:
            mode = self.path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o600
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.chmod(tmp, mode)
            os.replace(tmp, self.path)
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise KeyringError(
                f"{self.where}: cannot write: {exc.strerror or exc} (a file mounted from a "
                "Secret is read-only: give the router --keys-secret)") from None

    async def write(self, document: dict[str, Any], version: str) -> None:
        async with self._lock:
            await asyncio.to_thread(self._replace, document_text(document), version)
