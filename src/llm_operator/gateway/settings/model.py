"""The base of the gateway's settings models: camelCase names, no unknown field, frozen."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class SettingsModel(BaseModel):
    """A settings section: camelCase in YAML, snake_case in Python; unknown keys refused."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
    )
