"""docs/settings.md's example is a settings file the operator accepts, key for key."""

from __future__ import annotations

import re

import yaml

from llm_operator.profiles.settings import Settings

from samples import REPO


def test_the_documented_settings_file_is_accepted() -> None:
    text = (REPO / "docs" / "settings.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    raw = yaml.safe_load(block.group(1))
    settings = Settings.model_validate(raw)  # unknown keys are refused
    assert settings.autoscaler == raw["autoscaler"]
    assert settings.inference_pool.endpoint_picker.scorers == \
        raw["inferencePool"]["endpointPicker"]["scorers"]
