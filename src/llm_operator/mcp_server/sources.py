"""Registry sources: LLMModels from the Kubernetes watch and from a watched directory."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.informer import Informer
from llm_operator.kube import Kube
from llm_operator.registry.catalog import Served, ToolRecord, records_of, served_names

log = logging.getLogger(__name__)
API, PLURAL = "ai.example.io/v1alpha1", "llmmodels"
YAML_SUFFIXES = (".yaml", ".yml")

Publish = Callable[[list[ToolRecord]], Awaitable[None]]


def _parsed(obj: dict[str, Any], where: str) -> tuple[list[ToolRecord], dict[str, Served]]:
    """An object's tool records, and where it answers (a judge may be any model)."""
    try:
        model = parse_llmmodel(obj)
    except InvalidModel as exc:
        log.warning("%s is not a valid LLMModel, skipped: %s", where, exc)
        return [], {}
    return records_of(model, "kubernetes"), served_names(model)


@dataclass
class KubernetesSource:
    """LLMModels in one namespace (None: all) from a watch cache (llm_operator.informer).

    The informer lists, watches, resumes from the last resourceVersion (jittered backoff
    on errors) and relists on 410. Changes are published coalesced: a relist of a
    thousand models is one publish, not a thousand.
    """

    kube: Kube
    namespace: str | None
    publish: Publish
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    objects: dict[str, list[ToolRecord]] = field(default_factory=dict)
    on_served: Callable[[dict[str, Served]], None] | None = None  # every serving model
    served: dict[str, dict[str, Served]] = field(default_factory=dict)
    _dirty: asyncio.Event = field(default_factory=asyncio.Event)

    def _changed(self, kind: str, obj: dict[str, Any], _: dict[str, Any] | None) -> None:
        meta = obj.get("metadata", {})
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        records, served = ([], {}) if kind == "DELETED" else _parsed(obj, f"LLMModel {key}")
        if records:
            self.objects[key] = records
        else:
            self.objects.pop(key, None)
        if served:
            self.served[key] = served
        else:
            self.served.pop(key, None)
        self._dirty.set()

    async def run(self) -> None:
        informer = Informer(self.kube, API, PLURAL, self.namespace, on_change=self._changed,
                            sleep=self.sleep)
        watching = asyncio.create_task(informer.run())
        try:
            await informer.synced.wait()
            while True:
                self._dirty.clear()
                if self.on_served is not None:
                    self.on_served({n: w for ws in self.served.values() for n, w in ws.items()})
                await self.publish([r for rs in self.objects.values() for r in rs])
                self.synced.set()
                await self._dirty.wait()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching


LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: ~30x faster when present


def _fingerprint(path: Path) -> int:
    st = path.stat()
    return st.st_mtime_ns ^ st.st_size


def yaml_problem(path: Path, exc: UnicodeDecodeError | yaml.YAMLError) -> str:
    """A syntax error the way compilers say it: ``file:line:column: what is wrong``."""
    if isinstance(exc, UnicodeDecodeError):
        return f"{path}: not UTF-8 text (byte {exc.start})"
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    what = f"{problem} ({context})" if context else problem
    if mark is None:
        return f"{path}: not valid YAML: {what}"
    return f"{path}:{mark.line + 1}:{mark.column + 1}: not valid YAML: {what}"


def _read(path: Path, last: list[dict[str, Any]]
          ) -> tuple[list[dict[str, Any]], str | None]:
    """A file's LLMModel documents and None, or ``last`` and the problem reading it."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return last, f"{path}: cannot read: {exc.strerror or exc}"
    except UnicodeDecodeError as exc:
        return last, yaml_problem(path, exc)
    if not text and last:  # caught between truncating and writing: the write follows
        return last, None
    try:
        loaded = [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]
    except yaml.YAMLError as exc:
        return last, yaml_problem(path, exc)
    return [d for d in loaded if isinstance(d, dict) and d.get("kind") == "LLMModel"], None


def _yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in YAML_SUFFIXES and p.is_file())


@dataclass
class DirectoryCache:
    """LLMModel documents per file, re-read only when a file's mtime or size changes.

    A rescan after one edit in a directory of 1,000 models reads one file, not 1,000.
    A file that turns unreadable (a YAML error, or empty: an editor or `>` caught between
    truncating and writing it) keeps its last readable documents, so a typo or a save in
    progress never stops what the file described; the problem line says so.
    """

    directory: Path
    # path -> (fingerprint, its documents, the problem reading it now)
    _docs: dict[Path, tuple[int, list[dict[str, Any]], str | None]] = field(
        default_factory=dict)
    served: dict[str, Served] = field(default_factory=dict)  # as of the last records()

    def refresh(self) -> bool:
        """Re-read changed files; True when anything changed."""
        changed = False
        current = {}
        for path in _yaml_files(self.directory):
            try:
                current[path] = _fingerprint(path)
            except OSError:  # removed while scanning
                continue
        for path in set(self._docs) - set(current):
            del self._docs[path]
            changed = True
        for path, mark in current.items():
            if path in self._docs and self._docs[path][0] == mark:
                continue
            changed = True
            last = self._docs[path][1] if path in self._docs else []
            self._docs[path] = (mark, *_read(path, last))
        return changed

    def entries(self) -> list[tuple[Path, int, dict[str, Any] | str]]:
        """Every LLMModel document as (file, index, body), and (file, 0, problem) per file.

        A file that cannot be read now has its problem line first, then its last readable
        documents. A problem line names the file (and, for YAML syntax, ``file:line:column: ...``).
        """
        out: list[tuple[Path, int, dict[str, Any] | str]] = []
        for path in sorted(self._docs):
            _, docs, problem = self._docs[path]
            if problem is not None:
                kept = "; its last readable version is kept" if docs else ""
                out.append((path, 0, problem + kept))
            out += [(path, index, raw) for index, raw in enumerate(docs)]
        return out

    def records(self, statuses: dict[str, Any]) -> tuple[list[ToolRecord], list[str]]:
        """Tool records for every LLMModel document, and one problem line per bad one.

        ``statuses`` maps a model name (or namespace/name) to its status, as the local
        runtime writes it; a document's own ``status`` is used when the map has none.
        ``self.served`` is left with where each serving model answers.
        """
        records: list[ToolRecord] = []
        problems: list[str] = []
        served: dict[str, Served] = {}
        for path, index, raw in self.entries():
            if isinstance(raw, str):
                problems.append(raw)
                continue
            meta = raw.get("metadata") or {}
            name = str(meta.get("name"))
            status = statuses.get(f"{meta.get('namespace')}/{name}") or statuses.get(name)
            doc = raw if status is None else {**raw, "status": status}
            try:
                model = parse_llmmodel(doc)
            except InvalidModel as exc:
                problems.append(f"{path}: {name}: {exc}")
                continue
            records += records_of(model, "files", key=f"{path}#{index}")
            served.update(served_names(model))
        self.served = served
        return records, problems


def status_file_problem(data: Any) -> str | None:
    """Why parsed status-file content is not a complete map of model name -> status."""
    if data is None:
        return "it is empty"
    if not isinstance(data, dict):
        return f"it is a {type(data).__name__}, not a mapping of model names"
    for name, status in data.items():
        if not isinstance(status, dict) or not isinstance(status.get("phase"), str):
            return f"{name}: a status needs a phase"
    return None


@dataclass
class FileSource:
    """A directory of LLMModel YAML, rescanned when any file (or the status file) changes."""

    directory: Path
    publish: Publish
    status_file: Path | None = None
    interval: float = 0.2
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    on_served: Callable[[dict[str, Served]], None] | None = None  # every serving model

    def __post_init__(self) -> None:
        self._cache = DirectoryCache(self.directory)
        self._status_mark: int | None = None
        self._statuses: dict[str, Any] = {}

    def _refresh_statuses(self) -> bool:
        """Re-read the status file when it changed; True when the statuses changed.

        Only a complete, valid file replaces the statuses: a torn or garbled one (a writer
        that does not write atomically, a disk that filled up) keeps the last good state,
        so tools do not vanish and list_changed does not fan out to every client. A
        removed file means no statuses (each document's own status is used).
        """
        path = self.status_file
        mark = _fingerprint(path) if path is not None and path.is_file() else None
        if mark == self._status_mark:
            return False
        self._status_mark = mark
        if path is None or mark is None:
            had = bool(self._statuses)
            self._statuses = {}
            return had
        try:
            data = yaml.load(path.read_text(encoding="utf-8"), Loader=LOADER)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            log.warning("status file %s unreadable (%s); keeping the last good statuses",
                        path, type(exc).__name__)
            return False
        problem = status_file_problem(data)
        if problem is not None:
            log.warning("status file %s is not valid (%s); keeping the last good statuses",
                        path, problem)
            return False
        changed: bool = data != self._statuses
        self._statuses = data
        return changed

    def _scan(self) -> tuple[list[ToolRecord], list[str]] | None:
        """New records when a file or the status file changed (runs in a thread)."""
        files = self._cache.refresh()
        statuses = self._refresh_statuses()
        if not (files or statuses or not self.synced.is_set()):
            return None
        return self._cache.records(self._statuses)

    async def rescan(self) -> None:
        found = await asyncio.to_thread(self._scan)
        if found is None:
            return
        records, problems = found
        for line in problems:
            log.warning("skipped %s", line)
        if self.on_served is not None:
            self.on_served(self._cache.served)
        await self.publish(records)
        self.synced.set()

    async def run(self) -> None:
        while True:
            await self.rescan()
            await asyncio.sleep(self.interval)
