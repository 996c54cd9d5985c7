"""The console's key administration: every key's use, and keys created, disabled, rotated.

Only a visitor signed in with the admin token reaches it. Changes go to the same keys
file or Secret that `llmop keys` entries live in (``KeyAdmin.store``), checked as the
gateway will read them and written with the version read, then applied to the running
gateway at once (``KeyAdmin.applied``). A new or rotated key is shown once, in the answer
to the form that made it, and is kept nowhere: no page, log or metric holds it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from aiohttp import web
from multidict import MultiDictProxy

from llm_operator.access.keyedit import Allowances, create, listing, rotate, set_disabled
from llm_operator.access.keyring import ClientKey, Keyring, KeyringError, new_key
from llm_operator.access.keystore import KeyStore, change
from llm_operator.console.security import same_origin
from llm_operator.console.series import key_use

log = logging.getLogger(__name__)
PERIODS = ("month", "week", "day", "total")


@dataclass(frozen=True)
class KeyAdmin:
    """What administering keys needs: who is the administrator, where keys are written."""

    token: Callable[[str | None], bool]  # the admin token matches
    store: KeyStore
    applied: Callable[[Keyring], None]  # the running gateway takes these keys at once


def _globs(text: str) -> tuple[str, ...]:
    return tuple(g for g in (part.strip() for part in text.replace(",", " ").split()) if g)


def _number(form: MultiDictProxy[Any], name: str, label: str, kind: type[int] | type[float]
            ) -> Any:
    text = str(form.get(name) or "").strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise KeyringError(f"{label}: {text!r} is not a number") from None
    if value <= 0:
        raise KeyringError(f"{label}: give a number above 0, or leave it empty for no limit")
    return value


def allowances_of(form: MultiDictProxy[Any]) -> Allowances:
    """The new-key form's fields; KeyringError naming the field that is wrong."""
    period = str(form.get("period") or "month")
    if period not in PERIODS:
        raise KeyringError(f"budget period: choose one of {', '.join(PERIODS)}")
    return Allowances(
        models=_globs(str(form.get("models") or "")), tools=_globs(str(form.get("tools") or "")),
        requests_per_minute=_number(form, "rpm", "requests per minute", int),
        tokens_per_minute=_number(form, "tpm", "tokens per minute", int),
        budget_usd=_number(form, "budget", "budget (USD)", float),
        period=period)  # type: ignore[arg-type]  # checked against PERIODS above


class KeyPages:
    """The admin's keys page and its forms, for a console (``page`` renders a template)."""

    def __init__(self, admin: KeyAdmin, page: Callable[..., web.Response],
                 families: Callable[[], list[Any]], base: Callable[[web.Request], str]
                 ) -> None:
        self.admin, self.page, self.families, self.base = admin, page, families, base

    async def keys(self, message: str = "", status: int = 200) -> web.Response:
        """Every key in the store, disabled ones too, with what each used and spent."""
        try:
            data, _ = await self.admin.store.read()
            keys = listing(data, self.admin.store.where)
        except KeyringError as exc:
            keys, message = (), message or str(exc)
        families = self.families()
        rows = [self._row(key, families) for key in keys]
        answer = self.page("keys_admin.html", title="Keys", rows=rows, message=message,
                           where_stored=self.admin.store.where, periods=PERIODS)
        answer.set_status(status)
        return answer

    @staticmethod
    def _row(key: ClientKey, families: list[Any]) -> dict[str, Any]:
        use = key_use(families, key.id)
        spent = use.spend_usd or 0.0
        return {"key": key, "requests": int(sum(use.requests.values())),
                "tokens": int(sum(use.tokens.values())), "spent": spent,
                "share": min(spent / key.budget.usd, 1.0) if key.budget else None,
                "quoted": quote(key.id, safe="")}

    async def post(self, request: web.Request) -> web.Response:
        """POST /ui/keys (new) and /ui/keys/{id}/{disable,enable,rotate}."""
        if not same_origin(request):
            raise web.HTTPForbidden(text="the console's forms are posted from its own pages")
        action = request.match_info.get("action", "new")
        key_id = request.match_info.get("id", "")
        form = await request.post()
        try:
            # the key made once: a write applied but unanswered, tried again, finds it
            made = new_key()
            if action == "new":
                key_id = str(form.get("id") or "").strip()
                allowances = allowances_of(form)
                keyring, shown = await change(self.admin.store, lambda data: create(
                    data, key_id, allowances, self.admin.store.where, made))
            elif action == "rotate":
                keyring, shown = await change(self.admin.store, lambda data: rotate(
                    data, key_id, self.admin.store.where, made))
            elif action in ("disable", "enable"):
                keyring, shown = await change(self.admin.store, lambda data: (set_disabled(
                    data, key_id, action == "disable", self.admin.store.where), ""))
            else:
                raise web.HTTPNotFound(text=f"no key action {action!r}")
        except KeyringError as exc:
            return await self.keys(str(exc), status=400)
        self.admin.applied(keyring)
        log.info("console: the administrator %s client key %s", {
            "new": "created", "rotate": "rotated", "disable": "disabled",
            "enable": "enabled"}[action], key_id)
        if shown:
            return self.page("key_shown.html", title="Keys", key_id=key_id, key=shown,
                             rotated=action == "rotate", base=self.base(request))
        raise web.HTTPSeeOther("/ui/keys")
