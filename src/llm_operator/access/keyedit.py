"""Changes to a keys file's document: a key created, disabled, enabled or rotated (pure).

Each change takes the document as read (YAML's data) and gives the document to write,
checked as the gateway will read it: a change the keys file could not hold is refused
with a ``KeyringError`` that says what to fix, and nothing is written. The other entries
are kept as they were. A new or rotated key is returned once, to be shown once; the
document holds only its digest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from llm_operator.access.keyring import (
    ClientKey,
    KeyringError,
    Period,
    digest,
    new_key,
    parse_keyring,
)

ID_RULE = ("use letters, digits, '.', '_' and '-' (at most 63, the first a letter or digit): "
           "it names the key in metrics")


@dataclass(frozen=True)
class Allowances:
    """What a new key may do (the fields of `llmop keys new`)."""

    models: tuple[str, ...] = ()  # shell globs; empty: every model
    tools: tuple[str, ...] = ()  # empty: the tools of its models
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    budget_usd: float | None = None
    period: Period = "month"

    def entry(self, key_id: str, sha256: str) -> dict[str, Any]:
        """The keys-file entry, camelCase as the file spells it."""
        fields: dict[str, Any] = {"id": key_id, "sha256": sha256}
        if self.models:
            fields["models"] = list(self.models)
        if self.tools:
            fields["tools"] = list(self.tools)
        if self.requests_per_minute:
            fields["requestsPerMinute"] = self.requests_per_minute
        if self.tokens_per_minute:
            fields["tokensPerMinute"] = self.tokens_per_minute
        if self.budget_usd:
            fields["budget"] = {"usd": self.budget_usd, "period": self.period}
        return fields


def _entries(data: object, source: str) -> list[dict[str, Any]]:
    """The document's ``keys`` as a list of entries (copies), or KeyringError."""
    if data is None:
        return []
    if not isinstance(data, Mapping) or not isinstance(data.get("keys") or [], list | tuple):
        raise KeyringError(f"{source}: expected a mapping with a `keys` list")
    return [dict(e) if isinstance(e, Mapping) else e for e in data.get("keys") or []]


def _checked(data: object, entries: list[dict[str, Any]], source: str) -> dict[str, Any]:
    document = {**(dict(data) if isinstance(data, Mapping) else {}), "keys": entries}
    parse_keyring(document, source)  # as the gateway will read it
    return document


def _index(entries: list[dict[str, Any]], key_id: str, source: str) -> int:
    for index, entry in enumerate(entries):
        if isinstance(entry, Mapping) and entry.get("id") == key_id:
            return index
    raise KeyringError(f"{source}: no key {key_id!r}; the keys page lists them")


def create(data: object, key_id: str, allowances: Allowances,
           source: str = "<keys>", key: str | None = None) -> tuple[dict[str, Any], str]:
    """(the document with a new key ``key_id``, the key itself).

    Give ``key`` (made once, before the first try) where the edit may be applied again
    after a write whose answer was lost: finding its own entry, it changes nothing.
    """
    key = key or new_key()
    entries = _entries(data, source)
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("id") == key_id:
            if entry.get("sha256") == digest(key):  # this very edit, written already
                return _checked(data, entries, source), key
            raise KeyringError(f"{source}: a key {key_id!r} exists already: rotate it, or "
                               "choose another id")
    try:
        ClientKey.model_validate({"id": key_id, "sha256": "0" * 64})
    except ValueError:
        raise KeyringError(f"id {key_id!r}: {ID_RULE}") from None
    entries.append(allowances.entry(key_id, digest(key)))
    return _checked(data, entries, source), key


def set_disabled(data: object, key_id: str, disabled: bool,
                 source: str = "<keys>") -> dict[str, Any]:
    """The document with ``key_id`` disabled (refused from the next request) or enabled."""
    entries = _entries(data, source)
    entry = entries[_index(entries, key_id, source)]
    if disabled:
        entry["disabled"] = True
    else:
        entry.pop("disabled", None)
    return _checked(data, entries, source)


def rotate(data: object, key_id: str, source: str = "<keys>", key: str | None = None
           ) -> tuple[dict[str, Any], str]:
    """(the document with a new key for ``key_id``, that key): the old key stops working.

    The id, and so its metrics, spend and allowances, stay; a disabled key stays disabled.
    ``key``, made once before the first try, makes the edit the same when applied again.
    """
    entries = _entries(data, source)
    key = key or new_key()
    entries[_index(entries, key_id, source)]["sha256"] = digest(key)
    return _checked(data, entries, source), key


def listing(data: object, source: str = "<keys>") -> tuple[ClientKey, ...]:
    """Every key of the document (disabled ones too), as the gateway reads them."""
    return parse_keyring(data, source).keys
