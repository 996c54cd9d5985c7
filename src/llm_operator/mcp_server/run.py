"""Wire the configured registry sources into an MCP service and serve it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

from llm_operator.kube import Connection, Kube
from llm_operator.mcp_server.admin_store import ConfigMapStore
from llm_operator.mcp_server.app import McpService
from llm_operator.mcp_server.settings import McpSettings
from llm_operator.mcp_server.sources import FileSource, KubernetesSource
from llm_operator.registry.catalog import Served, ToolRecord


@contextlib.asynccontextmanager
async def service(settings: McpSettings, *, kube: Connection | None = None,
                  namespaces: Sequence[str | None] = (), files: Path | None = None,
                  status_file: Path | None = None,
                  admin_configmap: tuple[str, str] | None = None) -> AsyncIterator[McpService]:
    """An McpService whose sources start with its app (Kubernetes and/or a directory).

    With ``admin_configmap`` (namespace, name) admin registrations are kept in that
    ConfigMap and shared by every replica; without it they live in this process only.
    """
    if admin_configmap is not None and kube is None:
        raise ValueError("an admin ConfigMap needs a Kubernetes connection")
    svc = McpService(settings)
    async with contextlib.AsyncExitStack() as stack:
        if kube is not None:
            client = await stack.enter_async_context(Kube(kube))
            if admin_configmap is not None:
                store = ConfigMapStore(client, *admin_configmap, svc.publisher("admin"),
                                       settings.admin_endpoint_hosts)
                svc.admin.store = store
                svc.background.append(store.run)
                svc.readiness.append(store.synced)
            parts: dict[str | None, list[ToolRecord]] = {}
            served: dict[str | None, dict[str, Served]] = {}

            def kube_publisher(ns: str | None) -> Callable[[list[ToolRecord]], Awaitable[None]]:
                async def publish(records: list[ToolRecord]) -> None:
                    parts[ns] = records
                    await svc.publish("kubernetes", [r for rs in parts.values() for r in rs])
                return publish

            def kube_served(ns: str | None) -> Callable[[dict[str, Served]], None]:
                def note(found: dict[str, Served]) -> None:
                    served[ns] = found
                    svc.catalog.set_served("kubernetes", {
                        n: w for part in served.values() for n, w in part.items()})
                return note

            for ns in namespaces or (None,):
                source = KubernetesSource(client, ns, kube_publisher(ns),
                                          on_served=kube_served(ns))
                svc.background.append(source.run)
                svc.readiness.append(source.synced)
        if files is not None:
            file_source = FileSource(files, svc.publisher("files"), status_file=status_file,
                                     on_served=lambda found: svc.catalog.set_served("files",
                                                                                    found))
            svc.background.append(file_source.run)
            svc.readiness.append(file_source.synced)
        yield svc
