"""`llmop plan`: each model's memory against its accelerators, its pool's, or the GPU queue."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from llm_operator.api.kv_cache import mib_quantity
from llm_operator.api.pools import pools
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.cli.outcomes import (
    Outcome,
    each_document,
    print_problems,
    settings_from,
    settings_option,
)
from llm_operator.profiles.planner import Plan, plan
from llm_operator.profiles.pool import PoolPlan, plan_pool


@click.command(name="plan")
@click.option("-f", "--filename", "paths", multiple=True, metavar="FILE|DIR|-",
              help="LLMModel YAML file, directory (searched recursively) or - for stdin. "
              "Repeatable.")
@click.option("--cluster", is_flag=True, help="Instead: the GPU queue of the cluster in "
              "$KUBECONFIG (what runs, starts now, waits, and the nodes' accelerators).")
@click.option("-n", "--namespace", metavar="NS", help="With --cluster: one namespace "
              "(default: all).")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
@settings_option
def plan_cmd(paths: tuple[str, ...], cluster: bool, namespace: str | None, output: str,
             settings_path: str | None) -> None:
    """Estimate each model's memory and check that it fits its accelerators.

    Memory = weights (total parameters x bytes per parameter) + KV cache for the served
    context + runtime overhead. Verdicts: fits | tight | does-not-fit, with the reason and
    the accelerator count and tensor-parallel size to use; NODES: the nodes one replica
    spans (vLLM and SGLang models too large for one node, or spec.serving.nodes), with the
    pipeline-parallel size. With --cluster, the GPU queue: which accelerator models run,
    start now or wait for GPUs, in priority order.
    """
    settings = settings_from(settings_path)
    if cluster:
        from llm_operator.cli.queue import cluster_queue  # noqa: PLC0415 - the client only here

        cluster_queue(namespace, settings)
        return
    if not paths:
        raise click.UsageError("give -f FILE|DIR, or --cluster")
    err = Console(stderr=True, highlight=False)
    plans: list[Plan] = []
    models: list[LLMModel] = []

    def each(outcome: Outcome) -> None:
        if outcome.model is not None:
            plans.append(plan(outcome.model, settings.storage.min_size_gi_b))
            models.append(outcome.model)
        print_problems(err, outcome)

    code = each_document(paths, each)
    if output == "json":
        click.echo(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        console = Console(width=max(160, Console().width), highlight=False)
        console.print(_plan_table(plans))
        pooled = [plan_pool(members) for members in pools(models).values()
                  if len(members) > 1]
        if pooled:
            console.print(_pool_table(pooled))
    sys.exit(code)


def _pool_table(pooled: list[PoolPlan]) -> Table:
    """Each pool's memory with its largest members loaded, against an engine per model.

    Its CPU (the loaded members' together), what the pod runs beside the engine, and the
    replicas its members let it scale within (the memory and CPU are one replica's).
    """
    table = Table(title="Pools (spec.pool: one engine, at most MAX LOADED members at once)")
    for col in ("POOL", "MEMBERS", "MAX LOADED", "MEMORY GiB", "ONE ENGINE PER MODEL GiB",
                "LIMIT GiB", "CPU", "BESIDE THE ENGINE", "REPLICAS"):
        table.add_column(col, overflow="fold", no_wrap=col == "BESIDE THE ENGINE")
    for pool in pooled:
        every = sum(gib for _, gib in pool.members)
        low, high = pool.replicas
        table.add_row(pool.name, ", ".join(n for n, _ in pool.members), str(pool.max_loaded),
                      f"{pool.need_gib:.1f}", f"{every:.1f}",
                      f"{pool.limit_gib:.0f}" if pool.limit_gib else "-",
                      f"{pool.cpu_millicores}m", _beside(pool),
                      str(low) if low == high else f"{low}..{high}")
    return table


def _beside(pool: PoolPlan) -> str:
    """The pod's other containers and what they ask for together ("-": none)."""
    if not pool.beside:
        return "-"
    names = ", ".join(b.name for b in pool.beside)
    return f"{names}: {pool.beside_cpu_millicores}m CPU, {pool.beside_memory_mib} MiB"


def _plan_table(plans: list[Plan]) -> Table:
    table = Table(title="Capacity plan")
    for col in ("NAME", "MODE", "MEMORY GiB", "HOST KV", "ACCELERATOR", "COUNT", "TP", "NODES",
                "VERDICT", "REASON"):
        table.add_column(col, overflow="fold")
    colour = {"fits": "green", "tight": "yellow", "does-not-fit": "red"}
    for p in plans:
        table.add_row(p.name, p.mode, f"{p.estimated_memory_gib:.1f}",
                      mib_quantity(p.host_tier_mib) if p.host_tier_mib else "-",
                      p.accelerator or "-",
                      str(p.accelerator_count), str(p.tensor_parallel_size),
                      f"{p.nodes} (PP {p.pipeline_parallel_size})" if p.nodes > 1 else "1",
                      f"[{colour[p.verdict]}]{p.verdict}[/]", p.reason)
    return table
