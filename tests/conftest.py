"""Shared fixtures: the golden-file switch and a minimal valid model to mutate."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--update-golden", action="store_true",
                     help="Rewrite golden files from the current output instead of comparing.")


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


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
