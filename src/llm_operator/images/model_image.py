"""Model images: a GGUF file or a model directory under /models of an OCI image, no Docker."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from llm_operator.images.archive import Base, Layer, read_base, tar_entries, write
from llm_operator.render.weights import IMAGE_MODELS_DIR

LABEL = "ai.example.io/model-files"


def entries(source: Path) -> list[tuple[str, Path | None]]:
    """What the layer holds: /models and the file, or the directory's tree under it.

    Hidden files and directories (.git, .cache: a download's bookkeeping) are left out.
    """
    if source.is_file():
        return [(IMAGE_MODELS_DIR, None), (f"{IMAGE_MODELS_DIR}/{source.name}", source)]
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such file or directory")
    found: list[tuple[str, Path | None]] = [(IMAGE_MODELS_DIR, None)]
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if any(part.startswith(".") for part in relative.parts):
            continue
        if path.is_dir() or path.is_file():
            found.append((f"{IMAGE_MODELS_DIR}/{relative.as_posix()}",
                          None if path.is_dir() else path))
    if len(found) == 1:
        raise ValueError(f"{source}: holds no files to put in the image")
    return found


def build(source: Path, tag: str, out: Path, *, base: Path | None = None,
          arch: str = "amd64") -> Path:
    """Write ``out``, a docker-archive of ``tag``: ``base``'s layers (if any) and the model.

    Without a base the image has nothing to run: mount it as an image volume. With one that
    has sh, ln and sleep (busybox) it also works as a modelcar.
    """
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        layer = Layer(tar_entries(Path(tmp) / "models.tar", entries(source)))
        underneath: Base | None = read_base(base, Path(tmp) / "base") if base else None
        config: dict[str, Any] = dict(underneath.config) if underneath else {
            "architecture": arch, "os": "linux", "config": {}}
        config.pop("rootfs", None)
        image_config = dict(config.get("config") or {})
        image_config["Labels"] = {**(image_config.get("Labels") or {}),
                                  LABEL: f"/{IMAGE_MODELS_DIR}"}
        config["config"] = image_config
        config.pop("history", None)  # it would no longer match the layers
        return write(out, tag, [layer], config, underneath)
