"""`llmop plan --cluster`: the GPU queue as the operator sees it, read from a cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from llm_operator.api import labels as L
from llm_operator.kube import ApiError, Kube, connection
from llm_operator.operator.gpu_queue import GpuQueue
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.vendors import VENDORS
from llm_operator.reconcile.queue import node_of

ACCELERATOR_RESOURCES = frozenset(v.resource_key for v in VENDORS.values() if v.resource_key)


async def _read(namespace: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                                list[dict[str, Any]]]:
    async with Kube(connection(), attempts=2) as kube:
        models = await kube.list("ai.example.io/v1alpha1", "llmmodels", namespace)
        deployments = await kube.list("apps/v1", "deployments", namespace,
                                      label_selector=f"{L.K8S_MANAGED_BY}={L.MANAGED_BY_VALUE}")
        nodes = await kube.list("v1", "nodes", None)
    return models, deployments, nodes


def cluster_queue(namespace: str | None, settings: Settings) -> None:
    """Print every accelerator model's place: running, starts now, waiting (#), cannot fit."""
    try:
        models, deployments, nodes = asyncio.run(_read(namespace))
    except (ApiError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot read the cluster: {exc}") from None
    by_key = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in deployments}
    queue = GpuQueue(settings, lambda: models, lambda ns, name: by_key.get((ns, name)),
                     lambda: nodes)
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
            f"{claim.replicas} x {claim.per_replica} {claim.resource}", state,
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
