"""`llmop keys`: mint client keys and the keys-file entries the gateway and MCP server check."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

import click
import yaml
from pydantic import ValidationError

from llm_operator.access.keyedit import ID_RULE, Allowances
from llm_operator.access.keyfile import load_keyring
from llm_operator.access.keyring import ClientKey, KeyringError, Period, digest, new_key


@click.group()
def keys() -> None:
    """Create client keys for the gateway and the MCP server, and check keys files.

    A keys file lists each client's key as a SHA-256 digest (never the key), with the
    models and tools it may use, its rate limits and its budget. Mount it from a Secret
    and point the gateway (clientKeys.file) or `llmop mcp --client-keys` at it; edits apply
    without a restart. See docs/gateway.md#client-keys.
    """


@keys.command("new")
@click.argument("key_id", metavar="ID")
@click.option("--model", "models", multiple=True, metavar="GLOB",
              help="A model the key may use (shell glob; repeatable). Default: every model.")
@click.option("--tool", "tools", multiple=True, metavar="GLOB",
              help="An MCP tool the key may call (repeatable). Default: its models' tools.")
@click.option("--rpm", type=click.IntRange(1), help="Requests per minute.")
@click.option("--tpm", type=click.IntRange(1), help="Tokens per minute.")
@click.option("--budget-usd", type=click.FloatRange(0, min_open=True),
              help="Spend allowed per period, from the routes' prices.")
@click.option("--period", type=click.Choice(["day", "week", "month", "total"]),
              default="month", show_default=True, help="Budget period (UTC calendar).")
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: {id, key, entry} for scripts.")
def new(key_id: str, *, models: tuple[str, ...], tools: tuple[str, ...], rpm: int | None,
        tpm: int | None, budget_usd: float | None, period: str, output: str) -> None:
    """Print a new random key (once) and the keys-file entry that admits it.

    Give the key to the client; add the entry under `keys:` in the keys file. The file
    holds only the key's digest, so a leaked keys file opens nothing.

    \b
    Example:
      llmop keys new search-team --model 'gpt-*' --rpm 600 --budget-usd 50
    """
    key = new_key()
    allowances = Allowances(models, tools, rpm, tpm, budget_usd,
                            cast(Period, period))  # click's Choice: one of Period's
    fields = allowances.entry(key_id, digest(key))
    try:
        ClientKey.model_validate(fields)
    except ValidationError:
        raise click.BadParameter(ID_RULE, param_hint="ID") from None
    if output == "json":
        click.echo(json.dumps({"id": key_id, "key": key, "entry": fields}))
        return
    click.echo(f"Key for {key_id} (shown once; hand it to the client):\n  {key}\n")
    click.echo("Add this entry under `keys:` in the keys file:")
    click.echo(yaml.safe_dump([fields], sort_keys=False), nl=False)


@keys.command("hash")
def hash_command() -> None:
    """Print the SHA-256 digest of a key read from stdin (for a key you already have)."""
    given = sys.stdin.readline().strip()
    if not given:
        raise click.UsageError("pipe the key on stdin, e.g. printf %s \"$KEY\" | llmop keys hash")
    click.echo(digest(given))


@keys.command("check")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def check(path: Path) -> None:
    """Validate a keys file and list its keys (ids and allowances; no secrets in it)."""
    try:
        ring = load_keyring(path)
    except KeyringError as exc:
        raise click.ClickException(str(exc)) from None
    for key in ring.keys:
        parts = [f"models={','.join(key.models)}" if key.models is not None else "models=*"]
        if key.tools is not None:
            parts.append(f"tools={','.join(key.tools)}")
        if key.requests_per_minute:
            parts.append(f"rpm={key.requests_per_minute}")
        if key.tokens_per_minute:
            parts.append(f"tpm={key.tokens_per_minute}")
        if key.budget:
            parts.append(f"budget=${key.budget.usd:g}/{key.budget.period}")
        if key.disabled:
            parts.append("disabled")
        click.echo(f"{key.id}: {' '.join(parts)}")
    click.echo(f"{path}: {len(ring.keys)} key(s), valid")
