"""Drift by field ownership: whether a child holds, as ours, exactly what we would apply.

Server-side apply makes the field manager the owner of every field in its applied
configuration, and removes on the next apply the fields it owned but no longer sends.
Another client's write takes ownership of the fields it changes and may add fields of its
own (``kubectl set env`` adds a list entry). So a child needs applying when, and only when:

- a field we render is not owned by us (never applied, or another manager took it), or
- its value differs from what we render, or
- we own a field we no longer render (the next apply removes it).

Comparing whole objects instead (``desired ⊆ current`` with list lengths) re-applies forever
once another manager adds a list entry: apply never removes a field someone else owns.
The ownership comes from ``metadata.managedFields`` (``fieldsV1``): maps as ``f:<name>``,
associative list items as ``k:{<key fields>}``, set items as ``v:<value>``; an owned field
with nothing under it (``{}``) is a leaf or an atomic value, compared whole.
"""

from __future__ import annotations

import json
from typing import Any

IDENTITY = {(): frozenset({"apiVersion", "kind"}), ("metadata",): frozenset({"name", "namespace"})}


def owned_fields(obj: dict[str, Any], manager: str) -> dict[str, Any] | None:
    """The fieldsV1 a manager owns through Apply on the main resource (None: owns nothing)."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if (entry.get("manager") == manager and entry.get("operation") == "Apply"
                and not entry.get("subresource")):
            fields: dict[str, Any] = entry.get("fieldsV1") or {}
            return fields
    return None


def drift(desired: dict[str, Any], current: dict[str, Any], manager: str) -> str | None:
    """Why ``current`` must be applied again to become ``desired`` (None: it need not).

    The answer names the first field found, e.g. "spec.template.spec.containers[main].image
    is not ours".
    """
    fields = owned_fields(current, manager)
    if fields is None:
        return "no fields are ours yet"
    return _diff(desired, current, fields, ())


def _join(path: tuple[str, ...]) -> str:
    return ".".join(path).replace(".[", "[") or "(root)"


def _equal(desired: Any, current: Any) -> bool:
    """A whole value: ``current`` holds what ``desired`` says (server defaults aside)."""
    if isinstance(desired, dict):
        return isinstance(current, dict) and all(
            _equal(v, current.get(k)) or (k not in current and v in ({}, [], None))
            for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(current, list) and len(desired) == len(current) and all(
            _equal(d, c) for d, c in zip(desired, current, strict=True))
    return bool(desired == current)


def _diff(desired: Any, current: Any, fields: dict[str, Any], path: tuple[str, ...]
          ) -> str | None:
    if not any(k != "." for k in fields):  # a leaf, an atomic map or an atomic list
        return None if _equal(desired, current) else f"{_join(path)} differs"
    if isinstance(desired, dict):
        return _diff_map(desired, current if isinstance(current, dict) else {}, fields, path)
    if isinstance(desired, list):
        return _diff_list(desired, current if isinstance(current, list) else [], fields, path)
    return f"{_join(path)} differs"  # we own parts of something that is now a scalar


def _diff_map(desired: dict[str, Any], current: dict[str, Any], fields: dict[str, Any],
              path: tuple[str, ...]) -> str | None:
    skip = IDENTITY.get(path, frozenset())
    wanted = {k: v for k, v in desired.items() if v is not None and k not in skip}
    for key, value in wanted.items():
        owned = fields.get(f"f:{key}")
        if owned is None:
            return f"{_join((*path, key))} is not ours"
        if key not in current:
            if value in ({}, []):
                continue  # the server drops empty values; nothing to apply
            return f"{_join((*path, key))} is missing"
        found = _diff(value, current[key], owned, (*path, key))
        if found:
            return found
    for name in fields:
        if name.startswith("f:") and name[2:] not in wanted:
            return f"{_join((*path, name[2:]))} is ours but no longer rendered"
    return None


def _matches(item: Any, entry: str, index: int) -> bool:
    """Whether a rendered list item is the one a fieldsV1 list entry names."""
    kind, _, raw = entry.partition(":")
    if kind == "i":
        return raw == str(index)
    value = json.loads(raw)
    if kind == "v":
        return bool(item == value)
    if not isinstance(item, dict):
        return False
    # Key fields the item leaves out take the server's default (a port's protocol: TCP).
    return all(item.get(k, v) == v for k, v in value.items())


def _diff_list(desired: list[Any], current: list[Any], fields: dict[str, Any],
               path: tuple[str, ...]) -> str | None:
    entries = [k for k in fields if k[:2] in ("k:", "v:", "i:")]
    matched: set[str] = set()
    for index, item in enumerate(desired):
        label = f"[{item.get('name', index) if isinstance(item, dict) else item}]"
        entry = next((e for e in entries if e not in matched and _matches(item, e, index)),
                     None)
        if entry is None:
            return f"{_join((*path, label))} is not ours"
        matched.add(entry)
        twin = next((c for i, c in enumerate(current) if _matches(c, entry, i)), None)
        if twin is None:
            return f"{_join((*path, label))} is missing"
        if entry.startswith("v:"):
            continue
        found = _diff(item, twin, fields[entry], (*path, label))
        if found:
            return found
    stale = [e for e in entries if e not in matched]
    return f"{_join(path)} has an entry that is ours but no longer rendered" if stale else None
