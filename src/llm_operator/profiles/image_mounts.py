"""Which nodes can mount image volumes, and how a model image reaches the engine there."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llm_operator.profiles.settings import MountMode, Settings

# Image volumes (volumes[].image, KEP 4639): on by default from Kubernetes 1.35 (beta, with
# subPath since 1.33); the runtime mounts them: containerd from 2.1, CRI-O from 1.33 (the
# book's floor: the subPath this project mounts with).
KUBELET_FLOOR = (1, 35)
RUNTIME_FLOORS = {"containerd": (2, 1), "cri-o": (1, 33)}
REQUIREMENT = "Kubernetes 1.35+ with containerd 2.1+ or CRI-O 1.33+"
SETTING = "modelImages.mount"


def _version(text: str) -> tuple[int, int] | None:
    found = re.match(r"v?(\d+)\.(\d+)", text)
    return (int(found[1]), int(found[2])) if found else None


def image_volume_gap(node: Mapping[str, Any]) -> str | None:
    """Why this node cannot mount an image volume (its kubelet or runtime), or None."""
    info = (node.get("status") or {}).get("nodeInfo") or {}
    runtime = str(info.get("containerRuntimeVersion") or "")
    kubelet = str(info.get("kubeletVersion") or "")
    name, _, version = runtime.partition("://")
    floor = RUNTIME_FLOORS.get(name)
    have = _version(version)
    if floor is None or have is None or have < floor:
        return f"runs {runtime or 'an unknown runtime'}"
    kubelet_have = _version(kubelet)
    if kubelet_have is None or kubelet_have < KUBELET_FLOOR:
        return f"runs kubelet {kubelet or 'of an unknown version'}"
    return None


def candidates(nodes: Sequence[Mapping[str, Any]], selector: Mapping[str, str]
               ) -> list[Mapping[str, Any]]:
    """The schedulable nodes whose labels match the pods' node selector."""
    return [n for n in nodes
            if not (n.get("spec") or {}).get("unschedulable")
            and all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v
                    for k, v in selector.items())]


@dataclass(frozen=True)
class MountChoice:
    """The mount a model image gets, or why the one asked for cannot work here."""

    mode: MountMode
    problem: str | None = None


def choose(setting: str, nodes: Sequence[Mapping[str, Any]] | None,
           selector: Mapping[str, str]) -> MountChoice:
    """Make the setting concrete for the nodes that may run the model.

    ``nodes`` None: the cluster is not known (`llmop render`): auto means image-volume.
    auto takes image-volume only when every candidate node can mount one (the scheduler
    does not know which can), modelcar otherwise. image-volume asked for where no
    candidate can mount one is a problem naming the setting and the nodes.
    """
    if setting in ("modelcar", "pull"):
        return MountChoice("modelcar" if setting == "modelcar" else "pull")
    if nodes is None:
        return MountChoice("image-volume")
    pool = candidates(nodes, selector)
    gaps = {str((n.get("metadata") or {}).get("name")): image_volume_gap(n) for n in pool}
    if setting == "auto":
        able = bool(pool) and not any(gaps.values())
        return MountChoice("image-volume" if able else "modelcar")
    if pool and any(gap is None for gap in gaps.values()):
        return MountChoice("image-volume")
    why = "; ".join(f"{name} {gap}" for name, gap in sorted(gaps.items())) or \
        "no schedulable node matches the model's node selector"
    return MountChoice("image-volume", problem=(
        f"operator setting {SETTING}: image-volume, and no node that may run this model "
        f"can mount an image volume ({REQUIREMENT}): {why}; set {SETTING} to auto, "
        "modelcar or pull"))


def with_mount(settings: Settings, mode: MountMode) -> Settings:
    """Settings whose modelImages.mount is the concrete mode chosen."""
    if settings.model_images.mount == mode:
        return settings
    return settings.model_copy(update={"model_images": settings.model_images.model_copy(
        update={"mount": mode})})
