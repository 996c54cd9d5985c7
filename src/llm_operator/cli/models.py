"""`llmop models`: find models by capability, in files or in the cluster."""

from __future__ import annotations

import json
import sys
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import InvalidModel, parse_llmmodel
from llm_operator.cli.outcomes import Outcome, each_document, print_problems
from llm_operator.registry.query import ANY_PHASE, SERVING_PHASES, Query, select, summary


@click.command()
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
        print_problems(err, outcome)

    if paths:
        code = each_document(paths, each)
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
