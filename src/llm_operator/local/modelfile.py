"""A GGUF model file checked before it is served: its SHA-256 against the spec, its header read.

Used by `llmop up` and, in a cluster, by the `model-verify` init container
(`llmop model-verify`). A file whose hash was computed once carries a marker (size,
modification time, inode, digest): beside it, or in a markers directory when the file's
own directory cannot be written (a node file mounted read-only). So neither a restart nor
kubelet's retries of a file that failed its check hash gigabytes again; a changed file, or
a moved marker, is hashed anew.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
from collections.abc import Sequence
from pathlib import Path

from llm_operator.api.model_status import ModelFileStatus
from llm_operator.profiles.gguf import GgufError, describe, read_header

CHUNK = 8 << 20
MARKER_SUFFIX = ".llmop-sha256"


class ModelFileError(Exception):
    """The file must not be served; ``reason`` is the status reason (CamelCase)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def choose(source_dir: Path, patterns: Sequence[str] = ()) -> Path:
    """The GGUF file a download left in ``source_dir``: the first by name, projectors aside.

    With ``patterns``, the first whose name matches one (a claim kept across edits may
    hold the file of an earlier quantization).
    """
    found = sorted(p for p in source_dir.rglob("*.gguf")
                   if p.is_file() and not p.name.startswith("mmproj")
                   and (not patterns or any(fnmatch.fnmatchcase(p.name, g) for g in patterns)))
    if not found:
        matching = f" matching {', '.join(patterns)}" if patterns else ""
        raise ModelFileError("NoModelFile",
                             f"no .gguf file{matching} was downloaded to {source_dir}")
    return found[0]


def _markers(path: Path, markers: Path | None) -> list[Path]:
    """Where the file's digest may be noted: beside it, then in ``markers`` (by its path)."""
    beside = path.with_name(path.name + MARKER_SUFFIX)
    if markers is None:
        return [beside]
    keyed = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:32]
    return [beside, markers / f"{keyed}{MARKER_SUFFIX}"]


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns} {stat.st_ino}"


def noted_sha256(path: Path, markers: Path | None = None) -> str | None:
    """The digest a marker holds for ``path``, if the file is unchanged since it was hashed."""
    stamp = _stamp(path)
    for marker in _markers(path, markers):
        try:
            noted, digest = marker.read_text(encoding="utf-8").rsplit(" ", 1)
        except (OSError, ValueError):
            continue
        if noted == stamp:
            return digest.strip()
    return None


def read_sha256(path: Path) -> str:
    """The SHA-256 of the file's every byte (what the markers spare)."""
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            hasher.update(chunk)
    return hasher.hexdigest()


def _digest(path: Path, markers: Path | None) -> tuple[str, bool]:
    """The file's SHA-256, and whether a marker held it (the file was not read)."""
    digest = noted_sha256(path, markers)
    if digest is not None:
        return digest, True
    digest = read_sha256(path)
    for marker in _markers(path, markers):  # the first place that can be written
        with contextlib.suppress(OSError):
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{_stamp(path)} {digest}", encoding="utf-8")
            break
    return digest, False


def sha256_of(path: Path, markers: Path | None = None) -> str:
    """The file's SHA-256, from its marker when the file is unchanged since it was hashed."""
    return _digest(path, markers)[0]


def inspect(path: Path, sha256: str | None, markers: Path | None = None) -> ModelFileStatus:
    """``status.model`` for ``path``; ModelFileError if it must not be served."""
    if sha256 is not None:
        actual, noted = _digest(path, markers)
        if actual != sha256:
            again = " (hashed once: the file is not read again until it or the spec changes)" \
                if noted else ""
            raise ModelFileError("ChecksumMismatch", f"{path.name} has SHA-256 {actual}; "
                                 f"modelSource.sha256 expects {sha256}: the file is not the "
                                 f"one the spec names (a different or corrupt download){again}")
    try:
        with path.open("rb") as stream:
            header = read_header(stream)
    except GgufError as exc:
        raise ModelFileError("NotGGUF", f"{path.name}: {exc}") from None
    return describe(header, file=path.name, size_bytes=path.stat().st_size, sha256=sha256)
