"""Admin registrations kept in a ConfigMap, so every MCP server replica serves the same tools."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from llm_operator.api import labels as L
from llm_operator.informer import Informer
from llm_operator.kube import ApiError, Kube, path_of
from llm_operator.registry.catalog import AdminPayloadError, ToolRecord, from_admin

log = logging.getLogger(__name__)

STORE_LABEL = f"{L.PREFIX}mcp-admin-store"  # on the ConfigMap; its value is the store's name
Publish = Callable[[list[ToolRecord]], Awaitable[None]]


def admin_records(data: Mapping[str, str], allowed_hosts: Sequence[str] = ()
                  ) -> tuple[list[ToolRecord], list[str]]:
    """The tools a store's ConfigMap data holds (tool name -> JSON payload), and problems."""
    records: list[ToolRecord] = []
    problems: list[str] = []
    for name, raw in sorted(data.items()):
        try:
            records.append(from_admin(name, json.loads(raw), allowed_hosts))
        except (ValueError, AdminPayloadError) as exc:
            problems.append(f"{name}: {exc}")
    return records, problems


@dataclass
class ConfigMapStore:
    """One ConfigMap (``namespace``/``name``), one data key per registered tool.

    Writes are merge patches of one key, so two replicas registering different tools at once
    never overwrite each other. Every replica watches the ConfigMap and publishes what it
    holds: a registration made on one replica is served by all of them within a watch
    event, and survives restarts.
    """

    kube: Kube
    namespace: str
    name: str
    publish: Publish
    allowed_hosts: Sequence[str] = ()
    synced: asyncio.Event = field(default_factory=asyncio.Event)

    async def put(self, tool: str, payload: Mapping[str, Any]) -> None:
        body: dict[str, Any] = {"metadata": {"labels": {STORE_LABEL: self.name}},
                                "data": {tool: json.dumps(payload, sort_keys=True)}}
        try:
            await self.kube.merge_patch("v1", "configmaps", self.namespace, self.name,
                                        body=body)
        except ApiError as exc:
            if exc.status != 404:
                raise
            await self.kube.request("POST", path_of("v1", "configmaps", self.namespace),
                                    body={"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": self.name,
                                                       "labels": {STORE_LABEL: self.name}},
                                          "data": body["data"]})

    async def delete(self, tool: str) -> None:
        with contextlib.suppress(ApiError):  # already gone: nothing to delete
            await self.kube.merge_patch("v1", "configmaps", self.namespace, self.name,
                                        body={"data": {tool: None}})

    def _records(self, informer: Informer) -> list[ToolRecord]:
        held = informer.get(self.namespace, self.name) or {}
        records, problems = admin_records(held.get("data") or {}, self.allowed_hosts)
        for line in problems:
            log.warning("admin store %s/%s: skipped %s", self.namespace, self.name, line)
        return records

    async def run(self) -> None:
        changed = asyncio.Event()
        informer = Informer(self.kube, "v1", "configmaps", self.namespace,
                            label_selector=f"{STORE_LABEL}={self.name}",
                            on_change=lambda *_: changed.set())
        watching = asyncio.create_task(informer.run())
        try:
            await informer.synced.wait()
            while True:
                changed.clear()
                await self.publish(self._records(informer))
                self.synced.set()
                await changed.wait()
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
