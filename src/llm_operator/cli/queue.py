"""`llmop plan --cluster`: the GPU queue as the operator sees it, read from a cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from llm_operator.api import labels as L
from llm_operator.kube import PLURALS, ApiError, Kube, connection
from llm_operator.operator.gpu_queue import GpuQueue
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.vendors import VENDORS
from llm_operator.reconcile import workloads
from llm_operator.reconcile.queue import node_of

ACCELERATOR_RESOURCES = frozenset(v.resource_key for v in VENDORS.values() if v.resource_key)


Listed = dict[tuple[str, str, str], dict[str, Any]]  # (kind, namespace, name) -> object


async def _read(namespace: str | None) -> tuple[list[dict[str, Any]], Listed,
                                                list[dict[str, Any]]]:
    managed = f"{L.K8S_MANAGED_BY}={L.MANAGED_BY_VALUE}"
    async with Kube(connection(), attempts=2) as kube:
        models = await kube.list("ai.example.io/v1alpha1", "llmmodels", namespace)
        served: Listed = {}
        for api, kind in workloads.REFS:
            try:
                found = await kube.list(api, PLURALS[(api, kind)], namespace,
                                        label_selector=managed)
            except ApiError as exc:
                if exc.status != 404:  # 404: the cluster does not serve the kind
                    raise
                found = []
            served.update({(kind, o["metadata"]["namespace"], o["metadata"]["name"]): o
                           for o in found})
        nodes = await kube.list("v1", "nodes", None)
    return models, served, nodes


def cluster_queue(namespace: str | None, settings: Settings) -> None:
    """Print every accelerator model's place: running, starts now, waiting (#), cannot fit."""
    try:
        models, served, nodes = asyncio.run(_read(namespace))
    except (ApiError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read the cluster: {exc}") from None

    def live(namespace: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        return [(ref[1], served[(ref[1], namespace, place)])
                for ref, place in workloads.places(name)
                if (ref[1], namespace, place) in served]

    queue = GpuQueue(settings, lambda: models, live, lambda: nodes)
    admissions = queue.admissions()
    table = Table(title="GPU queue", title_justify="left")
    for column in ("MODEL", "PRIORITY", "NEEDS", "STATE", "WHY"):
        table.add_column(column, overflow="fold")
    rows = []
    for doc in models:
        claim = queue.claim(doc)
        if claim is None:
            continue
        admission = admissions[claim.key]
        if claim.running:
            state = "[green]running[/]"
        elif admission.admitted:
            state = "[green]starts now[/]"
        elif admission.position:
            state = f"[yellow]waiting #{admission.position}[/]"
        else:
            state = "[red]cannot fit[/]"
        rows.append((claim.resource, admission.position or 0, claim.key, [
            f"{claim.key[0]}/{claim.key[1]}", claim.priority,
            claim.needs, state,
            admission.reason]))
    for *_, row in sorted(rows):
        table.add_row(*row)
    console = Console(width=max(120, Console().width), highlight=False)
    console.print(table)
    capacity = Table(title="Nodes", title_justify="left")
    for column in ("NODE", "ALLOCATABLE", "SCHEDULABLE"):
        capacity.add_column(column)
    for node in sorted((node_of(n) for n in nodes), key=lambda n: n.name):
        offered = ", ".join(f"{v} {k}" for k, v in sorted(node.allocatable.items())
                            if k in ACCELERATOR_RESOURCES)
        if offered:
            capacity.add_row(node.name, offered, "yes" if node.schedulable else "no")
    console.print(capacity)
