"""A GGUF model file checked before it is served: its SHA-256 against the spec, its header read.

Used by `llmop up` and, in a cluster, by the `model-verify` init container
(`llmop model-verify`). A file whose hash was checked once carries a marker beside it
(size, modification time, digest), so a restart does not hash gigabytes again.
"""

from __future__ import annotations

import contextlib
import hashlib
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


def choose(source_dir: Path) -> Path:
    """The GGUF file a download left in ``source_dir``: the first by name, projectors aside."""
    found = sorted(p for p in source_dir.rglob("*.gguf")
                   if p.is_file() and not p.name.startswith("mmproj"))
    if not found:
        raise ModelFileError("NoModelFile", f"no .gguf file was downloaded to {source_dir}")
    return found[0]


def _marker(path: Path) -> Path:
    return path.with_name(path.name + MARKER_SUFFIX)


def _stamp(path: Path) -> str:
    stat = path.stat()
    return f"{stat.st_size} {stat.st_mtime_ns}"


def sha256_of(path: Path) -> str:
    """The file's SHA-256, from its marker when the file is unchanged since it was hashed."""
    marker = _marker(path)
    try:
        stamp, digest = marker.read_text(encoding="utf-8").rsplit(" ", 1)
        if stamp == _stamp(path):
            return digest.strip()
    except (OSError, ValueError):
        pass
    hasher = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            hasher.update(chunk)
    digest = hasher.hexdigest()
    with contextlib.suppress(OSError):  # a read-only location: hash again next time
        marker.write_text(f"{_stamp(path)} {digest}", encoding="utf-8")
    return digest


def inspect(path: Path, sha256: str | None) -> ModelFileStatus:
    """``status.model`` for ``path``; ModelFileError if it must not be served."""
    if sha256 is not None:
        actual = sha256_of(path)
        if actual != sha256:
            raise ModelFileError("ChecksumMismatch", f"{path.name} has SHA-256 {actual}; "
                                 f"modelSource.sha256 expects {sha256}: the file is not the "
                                 "one the spec names (a different or corrupt download)")
    try:
        with path.open("rb") as stream:
            header = read_header(stream)
    except GgufError as exc:
        raise ModelFileError("NotGGUF", f"{path.name}: {exc}") from None
    return describe(header, file=path.name, size_bytes=path.stat().st_size, sha256=sha256)
