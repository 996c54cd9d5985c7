"""A docker-archive tar from layer tars and an image config: what `ctr import` and skopeo read."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Layer:
    """A layer tar on disk and its sha256 (the image's diff_id), cached beside it."""

    path: Path

    @property
    def diff_id(self) -> str:
        sums = self.path.with_suffix(".sha256")
        if not sums.exists() or sums.stat().st_mtime < self.path.stat().st_mtime:
            with self.path.open("rb") as f:
                sums.write_text(hashlib.file_digest(f, "sha256").hexdigest())
        return f"sha256:{sums.read_text().strip()}"


def tar_entries(out: Path, entries: Iterable[tuple[str, Path | None]]) -> Path:
    """A reproducible layer: (name in the image, file on disk or None for a directory).

    Root-owned, times zero, files 0644 unless executable (0755), directories 0755: the
    same input gives the same digest.
    """
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, path in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 0
            if path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            stat = path.stat()
            info.size = stat.st_size
            info.mode = 0o755 if stat.st_mode & 0o111 else 0o644
            with path.open("rb") as f:
                tar.addfile(info, f)
    os.replace(partial, out)
    return out


@dataclass(frozen=True)
class Base:
    """An image to build on: its config and its layers' files (named as in its archive)."""

    config: dict[str, Any]
    members: tuple[tuple[str, Path], ...]


def write(out: Path, tag: str, layers: list[Layer], config: dict[str, Any],
          base: Base | None = None) -> Path:
    """Write the archive: the base's layers, then ``layers``; ``config`` is the image's own.

    Its rootfs is made here: the base's diff_ids, then the layers'.
    """
    diff_ids = [*(base.config.get("rootfs", {}).get("diff_ids", []) if base else []),
                *(layer.diff_id for layer in layers)]
    blob = json.dumps({**config, "rootfs": {"type": "layers", "diff_ids": diff_ids}},
                      sort_keys=True).encode()
    config_name = f"{hashlib.sha256(blob).hexdigest()}.json"
    partial = out.with_name(out.name + ".partial")
    names = []
    with tarfile.open(partial, "w") as tar:
        _add_bytes(tar, config_name, blob)
        for name, path in base.members if base else ():
            tar.add(str(path), arcname=name)
            names.append(name)
        for layer in layers:
            name = f"{layer.diff_id.removeprefix('sha256:')}/layer.tar"
            tar.add(str(layer.path), arcname=name)
            names.append(name)
        manifest = [{"Config": config_name, "RepoTags": [tag], "Layers": names}]
        _add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
    os.replace(partial, out)
    return out


def read_base(archive: Path, into: Path) -> Base:
    """A docker-archive's image, its layers extracted under ``into``, to build on."""
    with tarfile.open(archive) as tar:
        manifest = json.load(_member(tar, "manifest.json"))
        if len(manifest) != 1:
            raise ValueError(f"{archive}: holds {len(manifest)} images; give one")
        config = json.load(_member(tar, manifest[0]["Config"]))
        members = []
        for name in manifest[0]["Layers"]:
            target = into / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("wb") as f:
                shutil.copyfileobj(_member(tar, name), f)
            members.append((name, target))
    return Base(config, tuple(members))


def _member(tar: tarfile.TarFile, name: str) -> io.BufferedReader:
    found = tar.extractfile(name)
    if found is None:
        raise ValueError(f"{tar.name!s}: {name} is not a file")
    return found  # type: ignore[return-value]


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
