"""Client keys as stored (SHA-256 digests, never the keys): who may call what, how often."""

from __future__ import annotations

import calendar
import datetime as dt
import fnmatch
import functools
import hashlib
import secrets
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from llm_operator.api.validation import field_errors

KEY_PREFIX = "sk-llmop-"
Period = Literal["day", "week", "month", "total"]


class _Entry(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True,
    )


class Budget(_Entry):
    """Spend allowed per calendar period (UTC), from the routes' prices."""

    usd: float = Field(gt=0)
    period: Period = "month"


class ClientKey(_Entry):
    """One client's key: its id (in metrics and logs), digest and allowances."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$",
                        description="SHA-256 of the key, lowercase hex (llmop keys new).")
    models: tuple[str, ...] | None = Field(
        None, description="Model names (shell globs) the key may use; unset: every model.")
    tools: tuple[str, ...] | None = Field(
        None, description="MCP tools (globs) the key may call; unset: the tools of its models.")
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    budget: Budget | None = None
    band: str | None = Field(
        None, pattern=r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$",
        description="The flow-control band of the key's requests (the gateway's "
        "flowControl.bands); unset: its default band. A request's objective header may "
        "lower it, never raise it.")
    exempt_guards: tuple[str, ...] | None = Field(
        None, description="Guardrails (guard names, shell globs) that never check this "
        "key's requests and answers, on every model (docs/guardrails.md); no header can "
        "switch a guard on or off.")
    disabled: bool = False

    @property
    def models_and_tools(self) -> tuple[tuple[str, ...] | None, tuple[str, ...] | None]:
        """What decides which tools the key sees (keys with equal allowances share pages)."""
        return self.models, self.tools

    def may_use(self, model: str) -> bool:
        return self.models is None or any(fnmatch.fnmatchcase(model, g) for g in self.models)

    def exempt_from(self, guard: str) -> bool:
        return self.exempt_guards is not None and any(
            fnmatch.fnmatchcase(guard, g) for g in self.exempt_guards)

    def may_call(self, tool: str, model: str | None) -> bool:
        """An MCP tool: by ``tools`` when set, else by the model the tool calls."""
        if self.tools is not None:
            return any(fnmatch.fnmatchcase(tool, g) for g in self.tools)
        return model is None or self.may_use(model)


class KeyringFile(_Entry):
    keys: tuple[ClientKey, ...] = ()

    @model_validator(mode="after")
    def _unique(self) -> KeyringFile:
        ids: set[str] = set()
        digests: set[str] = set()
        for index, key in enumerate(self.keys):
            if key.id in ids:
                raise ValueError(f"keys[{index}]: id {key.id!r} is used twice")
            if key.sha256 in digests:
                raise ValueError(f"keys[{index}] ({key.id}): the same key as an earlier entry")
            ids.add(key.id)
            digests.add(key.sha256)
        return self


class KeyringError(ValueError):
    """The keys file is invalid; the message names each bad field (never a key)."""


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client sent: OpenAI's bearer token, or Anthropic's / Azure's header."""
    auth = headers.get("Authorization")
    if auth is not None:
        scheme, _, token = auth.partition(" ")
        return token.strip() or None if scheme.lower() == "bearer" else None
    for name in ("x-api-key", "api-key"):
        if given := headers.get(name, "").strip():
            return given
    return None


def digest(key: str) -> str:
    """What the keys file stores for ``key``."""
    return hashlib.sha256(key.strip().encode()).hexdigest()


def new_key() -> str:
    """A fresh client key: 256 random bits, prefixed so scanners recognise it."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


class Keyring:
    """Looks keys up by digest; an empty keyring (no file configured) admits nobody."""

    def __init__(self, keys: tuple[ClientKey, ...] = ()) -> None:
        self.keys = keys
        self._by_digest = {k.sha256: k for k in keys}

    def find(self, key: str) -> ClientKey | None:
        """The enabled entry for a presented key, or None (unknown, revoked or disabled)."""
        entry = self._by_digest.get(digest(key))
        return None if entry is None or entry.disabled else entry


def parse_keyring(data: object, source: str = "<keys>") -> Keyring:
    if data is None:
        data = {}
    try:
        parsed = KeyringFile.model_validate(data)
    except ValidationError as exc:
        raise KeyringError(field_errors(exc, source)) from None
    return Keyring(parsed.keys)


def period_of(period: Period, now: dt.datetime) -> tuple[str, dt.datetime | None]:
    """(name of the period ``now`` is in, when the next one starts; None for total), UTC."""
    return _period_of_day(period, now.astimezone(dt.UTC).date())


@functools.lru_cache(maxsize=64)  # asked twice per request with a budget, for the same day
def _period_of_day(period: Period, day: dt.date) -> tuple[str, dt.datetime | None]:
    if period == "total":
        return "total", None
    if period == "day":
        start = day
        nxt = day + dt.timedelta(days=1)
        name = start.isoformat()
    elif period == "week":
        year, week, weekday = day.isocalendar()
        start = day - dt.timedelta(days=weekday - 1)
        nxt = start + dt.timedelta(days=7)
        name = f"{year}-W{week:02d}"
    else:
        last = calendar.monthrange(day.year, day.month)[1]
        nxt = day.replace(day=last) + dt.timedelta(days=1)
        name = f"{day.year}-{day.month:02d}"
    return name, dt.datetime.combine(nxt, dt.time(), dt.UTC)
