"""The `llmop` command: validate, plan and render LLMModels, and print the CRD."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from llm_operator import __version__
from llm_operator.api.crd import crd
from llm_operator.api.pools import pools
from llm_operator.api.references import declared, unknown_guard_models
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, Problem, parse_llmmodel
from llm_operator.cli.chat import chat
from llm_operator.cli.fetch import model_fetch
from llm_operator.cli.gateway import gateway
from llm_operator.cli.keys import keys
from llm_operator.cli.loading import Document, load_documents, load_settings
from llm_operator.cli.local import down, setup, status, up
from llm_operator.cli.lora_sync import lora_sync
from llm_operator.cli.mcp import mcp
from llm_operator.cli.model_image import model_image
from llm_operator.cli.router import router
from llm_operator.cli.verify import model_verify
from llm_operator.profiles.planner import Plan, plan
from llm_operator.profiles.pool import PoolPlan, across_pools, plan_pool
from llm_operator.profiles.settings import Settings
from llm_operator.registry.query import ANY_PHASE, SERVING_PHASES, Query, select, summary
from llm_operator.render import RenderError, placement_problems, render
from llm_operator.render.pool_engine import member_problems, pool_objects

CRD_PATH = "config/crd/bases/ai.example.io_llmmodels.yaml"

files_option = click.option(
    "-f", "--filename", "paths", multiple=True, required=True, metavar="FILE|DIR|-",
    help="LLMModel YAML file, directory (searched recursively) or - for stdin. Repeatable.",
)
settings_option = click.option(
    "--settings", "settings_path", metavar="FILE", envvar="LLMOP_SETTINGS",
    help="Operator settings YAML (image mirrors, node selectors, storage class, Prometheus). "
    "Defaults to $LLMOP_SETTINGS, else built-in defaults. See docs/settings.md.",
)


def dump_yaml_documents(objects: list[dict[str, Any]]) -> str:
    return "".join("---\n" + yaml.safe_dump(o, sort_keys=False) for o in objects)


@dataclass
class Outcome:
    """What happened to one document."""

    doc: Document
    model: LLMModel | None
    problems: list[Problem]


def _errors(console: Console, outcome: Outcome) -> None:
    for p in outcome.problems:
        where = f"{p.path}: " if p.path else ""
        console.print(f"[red]error[/red] {outcome.doc.file}: {outcome.doc.label}: {where}"
                      f"{p.message}", highlight=False, markup=True, soft_wrap=True)


def _outcomes(paths: tuple[str, ...]) -> Iterator[Outcome]:
    for doc in load_documents(paths):
        if doc.error:
            yield Outcome(doc, None, [Problem("", doc.error)])
            continue
        try:
            yield Outcome(doc, parse_llmmodel(doc.body), [])
        except InvalidModel as exc:
            yield Outcome(doc, None, exc.problems)


def _settings(path: str | None) -> Settings:
    try:
        return load_settings(path)
    except (OSError, yaml.YAMLError, ValidationError) as exc:
        raise click.UsageError(f"invalid settings file {path}: {exc}") from None


def _run(paths: tuple[str, ...], each: Callable[[Outcome], None]) -> int:
    """Apply ``each`` to every document; the exit code is 1 if any had a problem."""
    failed = 0
    seen = 0
    for outcome in _outcomes(paths):
        seen += 1
        each(outcome)
        failed += bool(outcome.problems)
    if seen == 0:
        raise click.UsageError(f"no YAML documents found in {', '.join(paths)}")
    return 1 if failed else 0


# `llmop --help` lists commands in the order a newcomer needs them.
COMMAND_ORDER = ("up", "chat", "status", "down", "validate", "plan", "render", "models", "crd",
                 "operator", "router", "gateway", "mcp", "keys", "model-image", "model-fetch",
                 "model-verify", "lora-sync")


class Commands(click.Group):
    """A group that lists its commands in COMMAND_ORDER, each docstring's first sentence whole."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        return sorted(names, key=lambda n: (COMMAND_ORDER.index(n) if n in COMMAND_ORDER
                                            else len(COMMAND_ORDER), n))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, command.get_short_help_str(limit=200))
                for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=Commands,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="llmop")
def cli() -> None:
    """llm-operator: large language models as Kubernetes resources, or on this machine.

    \b
    On this machine, no cluster needed:
      llmop up                    serve examples/local (Gemma 3 270M) until Ctrl-C
      llmop chat                  talk to it in the terminal
    \b
    For a cluster, describe a model once as an LLMModel (ai.example.io/v1alpha1), then:
      llmop validate -f config/samples/      check documents, with field paths
      llmop plan -f config/samples/          will it fit? memory and accelerators
      llmop render -f model.yaml | kubectl apply -f -
      llmop crd > llmmodels-crd.yaml         the CustomResourceDefinition
    """


@cli.command(name="crd")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of stdout.")
def crd_cmd(output: str | None) -> None:
    """Print the LLMModel CustomResourceDefinition (generated from the API types)."""
    text = "# Generated by `llmop crd` from src/llm_operator/api. Do not edit.\n" + \
        yaml.safe_dump(crd(), sort_keys=False, width=100)
    if output:
        Path(output).write_text(text, encoding="utf-8")
    else:
        click.echo(text, nl=False)


@cli.command()
@files_option
@settings_option
def validate(paths: tuple[str, ...], settings_path: str | None) -> None:
    """Check LLMModel documents: schema, cross-field rules and placement.

    Prints one line per problem (file, object, field path, what to change) and one OK line
    per valid document; exits 1 if any document has a problem. A guard's judge must be one
    of the documents given (its modelId or namespace/name): give its file too, as every
    member of a pool (spec.pool), which must agree and fit together.
    """
    settings = _settings(settings_path)
    out, err = Console(highlight=False), Console(stderr=True, highlight=False)
    outcomes: list[Outcome] = []
    _run(paths, outcomes.append)  # every document first: a judge may be declared in another
    models = [o.model for o in outcomes if o.model is not None]
    known = declared(models)
    pooled = across_pools(models, "among the documents given")
    for outcome in outcomes:
        if outcome.model is not None:
            model_plan = plan(outcome.model, settings.storage.min_size_gi_b)
            outcome.problems = [
                *placement_problems(outcome.model, settings, model_plan),
                *unknown_guard_models(outcome.model, known, "among the documents given"),
                *pooled.get((outcome.model.namespace, outcome.model.name), [])]
            if not outcome.problems:
                note = f" ({model_plan.verdict}: {model_plan.reason})" \
                    if model_plan.verdict == "tight" else ""
                out.print(f"ok {outcome.doc.file}: {outcome.doc.label}{note}", soft_wrap=True)
        _errors(err, outcome)
    sys.exit(1 if any(o.problems for o in outcomes) else 0)


@cli.command(name="plan")
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
    settings = _settings(settings_path)
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
        _errors(err, outcome)

    code = _run(paths, each)
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

    Its CPU (the loaded members' together), and the replicas its members let it scale
    within (the memory and CPU are one replica's).
    """
    table = Table(title="Pools (spec.pool: one engine, at most MAX LOADED members at once)")
    for col in ("POOL", "MEMBERS", "MAX LOADED", "MEMORY GiB", "ONE ENGINE PER MODEL GiB",
                "LIMIT GiB", "CPU", "REPLICAS"):
        table.add_column(col, overflow="fold")
    for pool in pooled:
        every = sum(gib for _, gib in pool.members)
        low, high = pool.replicas
        table.add_row(pool.name, ", ".join(n for n, _ in pool.members), str(pool.max_loaded),
                      f"{pool.need_gib:.1f}", f"{every:.1f}",
                      f"{pool.limit_gib:.0f}" if pool.limit_gib else "-",
                      f"{pool.cpu_millicores}m", str(low) if low == high else f"{low}..{high}")
    return table


def _plan_table(plans: list[Plan]) -> Table:
    table = Table(title="Capacity plan")
    for col in ("NAME", "MODE", "MEMORY GiB", "ACCELERATOR", "COUNT", "TP", "NODES", "VERDICT",
                "REASON"):
        table.add_column(col, overflow="fold")
    colour = {"fits": "green", "tight": "yellow", "does-not-fit": "red"}
    for p in plans:
        table.add_row(p.name, p.mode, f"{p.estimated_memory_gib:.1f}", p.accelerator or "-",
                      str(p.accelerator_count), str(p.tensor_parallel_size),
                      f"{p.nodes} (PP {p.pipeline_parallel_size})" if p.nodes > 1 else "1",
                      f"[{colour[p.verdict]}]{p.verdict}[/]", p.reason)
    return table


@cli.command(name="render")
@files_option
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml",
              show_default=True)
@click.option("--owner-uid", metavar="UID",
              help="Set ownerReferences to the LLMModel with this uid (as the operator does).")
@settings_option
def render_cmd(paths: tuple[str, ...], output: str, owner_uid: str | None,
               settings_path: str | None) -> None:
    """Render the Kubernetes objects that serve each model (ready for kubectl apply -f -).

    Valid models are rendered even when others fail; problems go to stderr and the exit
    code is 1. The members of a pool (spec.pool) given together are rendered as their
    pool's engine, once (without ownerReferences: the operator sets each member's).
    """
    settings = _settings(settings_path)
    err = Console(stderr=True, highlight=False)
    objects: list[dict[str, Any]] = []
    members: list[LLMModel] = []

    def each(outcome: Outcome) -> None:
        if outcome.model is not None and outcome.model.spec.pool is not None \
                and not outcome.model.spec.is_remote:
            outcome.problems = member_problems(outcome.model)
            if not outcome.problems:
                members.append(outcome.model)
        elif outcome.model is not None:
            try:
                objects.extend(render(outcome.model, settings, owner_uid))
            except RenderError as exc:
                outcome.problems = exc.problems
        _errors(err, outcome)

    code = _run(paths, each)
    refused = across_pools(members, "among the documents given")
    for (namespace, name), problems in sorted(refused.items()):
        err.print(f"error LLMModel {namespace}/{name}: " + "; ".join(map(str, problems)),
                  soft_wrap=True)
        code = 1
    for group in pools(m for m in members if (m.namespace, m.name) not in refused).values():
        objects.extend(pool_objects(group, plan_pool(group), settings))
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}, indent=2))
    else:
        click.echo(dump_yaml_documents(objects), nl=False)
    sys.exit(code)


@cli.command()
@click.option("-f", "--filename", "paths", multiple=True, metavar="FILE|DIR|-",
              help="LLMModel YAML files or directories (instead of a cluster).")
@click.option("-n", "--namespace", metavar="NS",
              help="Query LLMModels in this namespace of the cluster (default ai-models).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Query every namespace.")
@click.option("--domain", "domains", multiple=True, metavar="D",
              help="Required capability domain (repeatable: all must match), e.g. reasoning.")
@click.option("--max-vram", type=float, metavar="GiB",
              help="Only models whose per-accelerator VRAM tier fits in GiB (local models).")
@click.option("--min-context", type=int, metavar="K", help="Minimum context window, K tokens.")
@click.option("--vendor", type=click.Choice(["nvidia", "amd", "intel-gaudi", "cpu"]))
@click.option("--mode", type=click.Choice(["local", "remote"]))
@click.option("--thinking/--no-thinking", default=None, help="Only (non-)thinking models.")
@click.option("--phase", "phases", multiple=True, metavar="P",
              help="Status phase to match (repeatable), or 'any'. Default: Ready and Proxying "
              "in a cluster, any for files.")
@click.option("-o", "--output", type=click.Choice(["table", "json", "yaml"]), default="table",
              show_default=True)
def models(paths: tuple[str, ...], *, namespace: str | None, all_namespaces: bool,
           domains: tuple[str, ...], max_vram: float | None,
           min_context: int | None, vendor: str | None, mode: str | None,
           thinking: bool | None, phases: tuple[str, ...], output: str) -> None:
    """Find models by capability, like the guide's find_models().

    In a cluster (your kubeconfig), what labels can express goes to the API server as a
    label selector; context window, thinking and phase are filtered here.

    \b
    Examples:
      llmop models --domain reasoning --max-vram 24 --min-context 128
      llmop models -A --vendor amd --phase any
      llmop models -f config/samples --mode remote -o json
    """
    if paths and (namespace or all_namespaces):
        raise click.UsageError("query either files (-f) or the cluster (-n/-A), not both")
    if namespace and all_namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    query = Query(domains=domains, max_vram_gib=max_vram, min_context_k=min_context,
                  vendor=vendor, mode=mode, thinking=thinking,
                  phases=phases or ((ANY_PHASE,) if paths else SERVING_PHASES))
    err = Console(stderr=True, highlight=False)
    found: list[LLMModel] = []

    def each(outcome: Outcome) -> None:
        if outcome.model is not None:
            found.append(outcome.model)
        _errors(err, outcome)

    if paths:
        code = _run(paths, each)
    else:
        code = 0
        for doc in _cluster_models(None if all_namespaces else namespace or "ai-models",
                                   query.label_selector()):
            try:
                found.append(parse_llmmodel(doc))
            except InvalidModel as exc:
                meta = doc.get("metadata", {})
                err.print(f"skipped {meta.get('namespace')}/{meta.get('name')}: {exc}")
    rows = [summary(m) for m in select(found, query)]
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
    elif output == "yaml":
        click.echo(yaml.safe_dump(rows, sort_keys=False), nl=False)
    elif not rows:
        click.echo("No matching models found.")
    else:
        table = Table(box=None)
        for col in ("NAME", "MODEL", "VENDOR", "VRAM", "CONTEXT", "STATUS", "ENDPOINT"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["name"], r["modelId"], r["vendor"] or "remote",
                          str(r["vramPerAcceleratorGiB"] or 0), str(r["contextWindowK"] or ""),
                          r["status"] or "", r["endpoint"] or "")
        Console(width=max(160, Console().width), highlight=False).print(table)
    sys.exit(code)


@cli.command()
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Watch only these namespaces (repeatable).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch every namespace (default).")
@settings_option
@click.option("--resync", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Re-reconcile every model this often, repairing drift. Changes to a "
              "model, its children or its Pods are reconciled as they happen.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Models reconciled at once (never two reconciles of one model).")
@click.option("--liveness", metavar="URL",
              help="Serve a health endpoint, e.g. http://0.0.0.0:8080/healthz (for probes).")
@click.option("--metrics-port", type=int, metavar="PORT",
              help="Serve the operator's Prometheus metrics on this port (/metrics).")
@click.option("--leader-elect", is_flag=True,
              help="Run as one of several replicas: only the holder of a Lease reconciles; "
              "the others stand by and take over within ~15 s if it goes away.")
@click.option("--lease-namespace", envvar="POD_NAMESPACE", default="llm-operator-system",
              show_default=True, help="Namespace of the Lease (in a pod: $POD_NAMESPACE).")
@click.option("--lease-name", default="llm-operator", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def operator(namespaces: tuple[str, ...], *, all_namespaces: bool, settings_path: str | None,
             resync: float, workers: int, liveness: str | None, metrics_port: int | None,
             leader_elect: bool, lease_namespace: str, lease_name: str,
             log_level: str) -> None:
    """Run the operator: reconcile LLMModels into running, observed workloads.

    Uses in-cluster credentials inside a pod and your kubeconfig elsewhere. For each
    LLMModel it checks placement and Secrets, applies the rendered children with server-side
    apply, prunes the ones no longer wanted, keeps discovery labels exact, and writes the
    status observed from the model's Deployment and Pods. It reads the cluster from watches
    (models, their children, their Pods) and writes only what differs from what it owns.
    """
    import asyncio  # noqa: PLC0415 - the operator's dependencies only for this command
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from llm_operator.kube import connection  # noqa: PLC0415
    from llm_operator.leader import LeaseTerms  # noqa: PLC0415
    from llm_operator.operator.run import run_operator  # noqa: PLC0415

    if namespaces and all_namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = _settings(settings_path)
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    leader = LeaseTerms(namespace=lease_namespace, identity=identity, name=lease_name) \
        if leader_elect else None

    async def main() -> None:
        # In a container the operator is PID 1, which ignores SIGTERM unless it handles it:
        # a deleted leader pod then renewed its Lease until SIGKILL, 30 s, and the standby
        # waited out the Lease on top. On SIGTERM it stops and hands the Lease back.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_operator(connection(), settings, namespaces=namespaces,
                           resync_seconds=resync, workers=workers, liveness=liveness,
                           metrics_port=metrics_port, leader=leader, stop=stop)

    asyncio.run(main())


def _cluster_models(namespace: str | None, selector: str) -> list[dict[str, Any]]:
    import asyncio  # noqa: PLC0415 - the client only for cluster queries

    from llm_operator.kube import ApiError, Kube, connection  # noqa: PLC0415

    async def fetch() -> list[dict[str, Any]]:
        async with Kube(connection(), attempts=2) as kube:
            return await kube.list("ai.example.io/v1alpha1", "llmmodels", namespace,
                                   label_selector=selector or None)

    try:
        return asyncio.run(fetch())
    except (ApiError, OSError, ValueError) as exc:
        raise click.ClickException(f"cannot list LLMModels: {exc}") from None


for command in (up, setup, chat, status, down, gateway, keys, model_fetch, model_verify,
                model_image, lora_sync, router, mcp):
    cli.add_command(command)


def main() -> None:
    cli(prog_name="llmop")
