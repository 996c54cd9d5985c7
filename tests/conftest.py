"""Shared fixtures: repository paths, sample documents and the golden-file switch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "config" / "samples"
GUIDE_SAMPLES = sorted(SAMPLES.glob("*.yaml"))
EDGE_SAMPLES = sorted((SAMPLES / "edge").glob("*.yaml"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="Rewrite golden files from the current output instead of comparing.")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture
def base_local() -> dict[str, Any]:
    """A minimal valid local model (vLLM on one H100) to mutate in table tests."""
    return {
        "apiVersion": "ai.example.io/v1alpha1",
        "kind": "LLMModel",
        "metadata": {"name": "base", "namespace": "ai-models"},
        "spec": {
            "modelId": "Qwen/Qwen3.5-9B",
            "deploymentMode": "local",
            "totalParametersBillions": 9,
            "contextWindowK": 32,
            "resources": {"vramPerAcceleratorGiB": 80},
        },
    }
