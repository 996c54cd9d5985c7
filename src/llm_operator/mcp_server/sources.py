"""Registry sources: LLMModels from the Kubernetes watch and from a watched directory."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.kube import ApiError, Kube
from llm_operator.registry.catalog import ToolRecord, from_model

log = logging.getLogger(__name__)
API, PLURAL = "ai.example.io/v1alpha1", "llmmodels"
YAML_SUFFIXES = (".yaml", ".yml")

Publish = Callable[[list[ToolRecord]], Awaitable[None]]


def _record(obj: dict[str, Any], where: str) -> ToolRecord | None:
    try:
        return from_model(parse_llmmodel(obj), "kubernetes")
    except InvalidModel as exc:
        log.warning("%s is not a valid LLMModel, skipped: %s", where, exc)
        return None


@dataclass
class KubernetesSource:
    """List, then watch, LLMModels in one namespace (None: all); relist on 410 or error.

    Reconnects with jittered exponential backoff (0.5 s doubling to 30 s) and resumes
    from the last resourceVersion it saw, so a dropped watch replays nothing twice.
    """

    kube: Kube
    namespace: str | None
    publish: Publish
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    objects: dict[str, ToolRecord] = field(default_factory=dict)

    async def _emit(self) -> None:
        await self.publish(list(self.objects.values()))

    def _upsert(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        record = _record(obj, f"LLMModel {key}")
        if record is None:
            self.objects.pop(key, None)
        else:
            self.objects[key] = record

    async def run(self) -> None:
        failures = 0
        version = ""
        while True:
            try:
                if not version:
                    items, version = await self.kube.list_versioned(API, PLURAL, self.namespace)
                    self.objects.clear()
                    for obj in items:
                        self._upsert(obj)
                    await self._emit()
                    self.synced.set()
                    failures = 0
                async for kind, obj in self.kube.watch(API, PLURAL, self.namespace,
                                                       resource_version=version):
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if kind == "BOOKMARK":
                        continue
                    meta = obj.get("metadata", {})
                    if kind == "DELETED":
                        self.objects.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
                    else:
                        self._upsert(obj)
                    await self._emit()
                    failures = 0
            except asyncio.CancelledError:
                raise
            except ApiError as exc:
                if exc.status == 410:
                    version = ""  # too old: relist
                    continue
                failures += 1
                log.warning("LLMModel watch failed (%s); retrying", exc)
            except Exception as exc:  # connection loss and anything else: back off, resume
                failures += 1
                log.warning("LLMModel watch interrupted (%s: %s); retrying",
                            type(exc).__name__, exc)
            if failures:
                delay = min(30.0, 0.5 * 2 ** (failures - 1))
                await self.sleep(delay * (0.5 + random.random() / 2))


def _scan(directory: Path, status_file: Path | None) -> dict[str, int]:
    """A fingerprint of every YAML file and the status file (path -> mtime_ns ^ size)."""
    found = {}
    for path in sorted(directory.rglob("*")):
        if path.suffix in YAML_SUFFIXES and path.is_file():
            st = path.stat()
            found[str(path)] = st.st_mtime_ns ^ st.st_size
    if status_file is not None and status_file.is_file():
        st = status_file.stat()
        found[str(status_file)] = st.st_mtime_ns ^ st.st_size
    return found


def load_directory(directory: Path, statuses: dict[str, Any]) -> tuple[list[ToolRecord],
                                                                       list[str]]:
    """Tool records for every LLMModel document, and one problem line per bad document.

    ``statuses`` maps a model name (or namespace/name) to its status, as the local runtime
    writes it; a document's own ``status`` is used when the map has none.
    """
    records: list[ToolRecord] = []
    problems: list[str] = []
    for path in sorted(directory.rglob("*")):
        if path.suffix not in YAML_SUFFIXES or not path.is_file():
            continue
        try:
            docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except (OSError, yaml.YAMLError) as exc:
            problems.append(f"{path}: not readable YAML: {exc}")
            continue
        for index, raw in enumerate(d for d in docs if d is not None):
            if not isinstance(raw, dict) or raw.get("kind") != "LLMModel":
                continue
            meta = raw.get("metadata") or {}
            name = str(meta.get("name"))
            status = statuses.get(f"{meta.get('namespace')}/{name}") or statuses.get(name)
            doc = raw if status is None else {**raw, "status": status}
            try:
                record = from_model(parse_llmmodel(doc), "files", key=f"{path}#{index}")
            except InvalidModel as exc:
                problems.append(f"{path}: {name}: {exc}")
                continue
            if record is not None:
                records.append(record)
    return records, problems


@dataclass
class FileSource:
    """A directory of LLMModel YAML, rescanned when any file (or the status file) changes."""

    directory: Path
    publish: Publish
    status_file: Path | None = None
    interval: float = 0.2
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    def _statuses(self) -> dict[str, Any]:
        if self.status_file is None or not self.status_file.is_file():
            return {}
        try:
            data = yaml.safe_load(self.status_file.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            log.warning("status file %s unreadable (%s); using document status", self.status_file,
                        exc)
            return {}
        return data if isinstance(data, dict) else {}

    async def rescan(self) -> None:
        records, problems = load_directory(self.directory, self._statuses())
        for line in problems:
            log.warning("skipped %s", line)
        await self.publish(records)
        self.synced.set()

    async def run(self) -> None:
        seen: dict[str, int] | None = None
        while True:
            current = await asyncio.to_thread(_scan, self.directory, self.status_file)
            if current != seen:
                seen = current
                await self.rescan()
            await asyncio.sleep(self.interval)
