"""A pool's members under llama-server's router mode, loaded and unloaded for a sleep group.

Where a pool limits its swaps (spec.pool.minResidencySeconds, maxSwapsPerMinute), the
gateway decides which member leaves, not the router's own least-recently-used choice: a
sleep group whose engines are the members (each keyed ``<base URL>#<model>``) puts one to
sleep with ``POST /models/unload`` and wakes one with ``POST /models/load``, each change
waited for in ``GET /models`` until the member is unloaded or loaded (or failed, with the
router's reason).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from llm_operator.gateway.routing.sleepers import CONTROL_SECONDS, SleepError

LOOK_EVERY_SECONDS = 0.05  # the router says nothing when a change is done: it is asked
REPORTED = ("value", "failed", "exit_code")  # of a member's status, as the router gives it


def member_key(base_url: str, model: str) -> str:
    """The sleep group's name for a member of the router at ``base_url``."""
    return f"{base_url}#{model}"


def _split(key: str) -> tuple[str, str]:
    base, _, model = key.rpartition("#")
    return base.removesuffix("/").removesuffix("/v1"), model


class LlamaRouterControl:
    """Members loaded and unloaded through the router's own endpoints."""

    def __init__(self) -> None:
        self._http: aiohttp.ClientSession | None = None

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            # a connection each: a kept one the router had closed meanwhile failed an unload
            # (ServerDisconnectedError) and with it the request waiting for a place; the
            # calls are few, on loopback or in the pod
            self._http = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=30),
                connector=aiohttp.TCPConnector(force_close=True))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()

    async def _status(self, root: str, model: str) -> dict[str, Any]:
        url = f"{root}/models"
        try:
            async with self._session().get(url) as r:
                text = await r.text()
                if r.status != 200:
                    raise SleepError(f"GET {url} answered {r.status}: {text[:300]}")
            for entry in json.loads(text).get("data") or ():
                if entry.get("id") == model:
                    status: dict[str, Any] = entry.get("status") or {}
                    return status
        except (aiohttp.ClientError, TimeoutError, ValueError, AttributeError) as exc:
            raise SleepError(f"GET {url}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        raise SleepError(f"the router at {root} has no model {model!r} (its --models-preset)")

    async def _ask(self, root: str, action: str, model: str) -> None:
        url = f"{root}/models/{action}"
        try:
            async with self._session().post(url, json={"model": model}) as r:
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise SleepError(f"POST {url}: {type(exc).__name__}: {exc}".rstrip(": ")) from None
        # "already running" / not running: the state it was asked for, or on its way there
        if r.status >= 300 and r.status != 400:
            raise SleepError(f"POST {url} ({model}) answered {r.status}: {text[:300]}")

    async def _until(self, root: str, model: str, *wanted: str) -> None:
        deadline = time.monotonic() + CONTROL_SECONDS
        while True:
            status = await self._status(root, model)
            value = status.get("value")
            if value in wanted:
                return
            if status.get("failed") and "loaded" in wanted:
                why = status.get("reason") or "see the pool's log"
                raise SleepError(f"{model} failed to load: {why}")
            if time.monotonic() > deadline:
                raise SleepError(f"{model} was not {' or '.join(wanted)} within "
                                 f"{CONTROL_SECONDS:.0f} s (the router says {value})")
            await asyncio.sleep(LOOK_EVERY_SECONDS)

    async def sleep(self, key: str) -> None:
        root, model = _split(key)
        await self._ask(root, "unload", model)
        await self._until(root, model, "unloaded")

    async def wake(self, key: str) -> None:
        root, model = _split(key)
        await self._ask(root, "load", model)
        # asleep after its idle time (pool.idleSeconds): its process holds its place, and
        # the request about to be sent wakes it
        await self._until(root, model, "loaded", "sleeping")

    async def status(self, key: str) -> dict[str, Any]:
        """The member's status as the router says it, for the gateway's own GET /models.

        Loaded, sleeping (its idle time passed), a failed load with its exit code: the
        operator then reads the engine's words from the pod's log, as with no gateway in
        front. SleepError where the router does not answer.
        """
        root, model = _split(key)
        said = await self._status(root, model)
        return {k: v for k, v in said.items() if k in REPORTED}

    async def sleeping(self, key: str) -> bool:
        root, model = _split(key)
        # loading (or downloading) holds a place as loaded does: its requests wait for it
        return (await self._status(root, model)).get("value") not in (
            "loaded", "loading", "downloading", "sleeping")
