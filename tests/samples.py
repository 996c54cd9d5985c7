"""Shared test data: repository paths and the sample documents."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "config" / "samples"
GUIDE_SAMPLES = sorted(SAMPLES.glob("*.yaml"))
EDGE_SAMPLES = sorted((SAMPLES / "edge").glob("*.yaml"))
LOCAL_EXAMPLES = REPO / "examples" / "local"
CLUSTER_EXAMPLES = sorted((REPO / "examples" / "cluster").glob("*.yaml"))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def sample_doc(stem: str) -> Any:
    """A guide or edge sample by file name (without .yaml)."""
    return load_yaml(next(p for p in GUIDE_SAMPLES + EDGE_SAMPLES if p.stem == stem))


def local_doc(stem: str) -> Any:
    """A model from examples/local (what `make up` serves) by file name."""
    return load_yaml(LOCAL_EXAMPLES / f"{stem}.yaml")
