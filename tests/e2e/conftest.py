"""The opt-in end-to-end suite: a real cluster from $KUBECONFIG, selected with `-m e2e`."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("KUBECONFIG"):
        return
    skip = pytest.mark.skip(reason="needs a real cluster: set KUBECONFIG (docs/testing.md)")
    for item in items:
        if "e2e" in item.keywords:
            item.add_marker(skip)
