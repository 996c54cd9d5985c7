"""A watch-fed cache of one kind of object: list once, then watch; reads never hit the server."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from llm_operator.kube import ApiError, Kube

log = logging.getLogger("llm_operator.informer")

Key = tuple[str, str]  # (namespace, name)
OnChange = Callable[[str, dict[str, Any], dict[str, Any] | None], None]


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _newer(candidate: dict[str, Any], known: dict[str, Any] | None) -> bool:
    """Whether ``candidate`` is a later version than ``known`` (unknown order: assume so)."""
    if known is None:
        return True
    new = (candidate.get("metadata") or {}).get("resourceVersion", "")
    old = (known.get("metadata") or {}).get("resourceVersion", "")
    if new.isdigit() and old.isdigit():  # etcd revisions; opaque elsewhere
        return int(new) > int(old)
    return bool(new != old)


@dataclass
class Informer:
    """List, then watch, one kind in one namespace (None: all), optionally by label selector.

    ``objects`` is the cache; ``synced`` is set after the first complete list. A dropped watch
    resumes from the last resourceVersion seen (jittered backoff, 0.5 s doubling to 30 s);
    410 Gone relists. A kind the server does not serve (its CRD is not installed: 404)
    counts as synced and empty, and is looked for again every ``absent_retry`` seconds.
    ``on_change(type, object, previous)`` is called for every change the cache takes, never
    for a watch event that repeats what ``store`` already put there (our own writes).
    With ``index_label``, ``select`` by that label is a lookup, not a scan: a reconcile of
    one model among thousands reads its children in constant time.
    """

    kube: Kube
    api_version: str
    plural: str
    namespace: str | None = None
    label_selector: str | None = None
    on_change: OnChange | None = None
    index_label: str | None = None
    absent_retry: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    absent: bool = False
    _index: dict[tuple[str, str], set[Key]] = field(default_factory=dict)

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def select(self, namespace: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        """Objects in ``namespace`` carrying every one of ``labels``."""
        if self.index_label in labels:
            keys = self._index.get((namespace, labels[self.index_label]), set())
            candidates = [self.objects[k] for k in sorted(keys)]
        else:
            candidates = [o for (ns, _), o in self.objects.items() if ns == namespace]
        return [obj for obj in candidates if all(
            _labels(obj).get(k) == v for k, v in labels.items())]

    def _indexed(self, key: Key) -> tuple[str, str] | None:
        obj = self.objects.get(key)
        if obj is None or self.index_label is None:
            return None
        value = _labels(obj).get(self.index_label)
        return None if value is None else (key[0], value)

    def _put(self, key: Key, obj: dict[str, Any] | None) -> None:
        """Replace (None: remove) the object at ``key``, keeping the index in step."""
        before = self._indexed(key)
        if before is not None:
            self._index[before].discard(key)
            if not self._index[before]:
                del self._index[before]
        if obj is None:
            self.objects.pop(key, None)
            return
        self.objects[key] = obj
        after = self._indexed(key)
        if after is not None:
            self._index.setdefault(after, set()).add(key)

    def store(self, obj: dict[str, Any]) -> None:
        """Take an object a write returned, unless the cache already has a later one."""
        key = key_of(obj)
        if _newer(obj, self.objects.get(key)):
            self._put(key, obj)

    def forget(self, namespace: str, name: str) -> None:
        self._put((namespace, name), None)

    def _notify(self, kind: str, obj: dict[str, Any], previous: dict[str, Any] | None) -> None:
        if self.on_change is not None:
            self.on_change(kind, obj, previous)

    def _take(self, kind: str, obj: dict[str, Any]) -> None:
        key = key_of(obj)
        previous = self.objects.get(key)
        if kind == "DELETED":
            self._put(key, None)
            self._notify(kind, obj, previous)
        elif _newer(obj, previous):
            self._put(key, obj)
            self._notify(kind, obj, previous)

    def _relisted(self, items: list[dict[str, Any]]) -> None:
        fresh = {key_of(obj): obj for obj in items}
        for key, gone in [(k, o) for k, o in self.objects.items() if k not in fresh]:
            self._put(key, None)
            self._notify("DELETED", gone, gone)
        for obj in items:
            self._take("ADDED", obj)

    async def run(self) -> None:
        failures = 0
        version = ""
        what = f"{self.plural} ({self.namespace or 'all namespaces'})"
        while True:
            try:
                if not version:
                    items, version = await self.kube.list_versioned(
                        self.api_version, self.plural, self.namespace, self.label_selector)
                    self.absent = False
                    self._relisted(items)
                    self.synced.set()
                    failures = 0
                async for kind, obj in self.kube.watch(
                        self.api_version, self.plural, self.namespace,
                        resource_version=version, label_selector=self.label_selector):
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if kind != "BOOKMARK":
                        self._take(kind, obj)
                    failures = 0
                continue  # the server ended the watch: resume
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status == 410:
                    version = ""
                    continue
                if exc.status == 404 and not version:  # the kind is not installed
                    if not self.absent:
                        log.info("%s: not served by this cluster; looking again every %.0f s",
                                 what, self.absent_retry)
                    self.absent = True
                    self._relisted([])
                    self.synced.set()
                    await self.sleep(self.absent_retry)
                    continue
                failures += 1
                log.warning("%s: watch failed (%s); retrying", what, exc)
            except Exception as exc:  # connection loss and the like: back off, resume
                failures += 1
                log.warning("%s: watch interrupted (%s: %s); retrying", what,
                            type(exc).__name__, exc)
            delay = min(30.0, 0.5 * 2 ** (failures - 1))
            await self.sleep(delay * (0.5 + random.random() / 2))
