"""`llmop gateway`: run the OpenAI-compatible gateway, and read what its client keys spent."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from llm_operator.access.keyring import KeyringError, period_of

config_option = click.option(
    "--config", "config_path", metavar="FILE", envvar="LLMOP_GATEWAY_CONFIG",
    help="Gateway YAML: routes from model names to upstream APIs (docs/gateway.md).")


def _load(config_path: str | None) -> Any:
    from llm_operator.gateway.settings.config import ConfigError, load_config  # noqa: PLC0415

    if config_path is None:
        raise click.UsageError("say which gateway: --config FILE (or $LLMOP_GATEWAY_CONFIG)")
    try:
        return load_config(config_path)
    except ConfigError as exc:
        raise click.ClickException(f"invalid gateway config:\n{exc}") from None


@click.group(invoke_without_command=True)
@config_option
@click.option("--host", help="Listen address (default: listen.host from the config).")
@click.option("--port", type=int, help="Listen port (default: listen.port, 8000).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
@click.pass_context
def gateway(ctx: click.Context, config_path: str | None, host: str | None, port: int | None,
            log_level: str) -> None:
    """Run the OpenAI-compatible gateway in front of local or frontier models.

    Serves /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and
    /v1/models, plus /health, /ready and /metrics. Injects each route's API key, applies its
    rate limits, retries transient upstream failures and relays streams chunk by chunk.
    With clientKeys it admits only listed keys; with redis, limits and spend are shared by
    every replica. Prompts and keys are never logged. Providers are reached through
    HTTPS_PROXY / HTTP_PROXY unless NO_PROXY lists them; SSL_CERT_FILE adds a private CA.

    \b
    Examples:
      llmop gateway --config gateway.yaml           serve
      llmop gateway spend --config gateway.yaml     what each client key spent
    """
    if ctx.invoked_subcommand is not None:
        return
    from llm_operator.gateway.app import run  # noqa: PLC0415 - aiohttp only for this command

    config = _load(config_path)
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from llm_operator.gateway.upstream.proxies import ProxyError  # noqa: PLC0415

    try:
        run(config, host, port)
    except KeyringError as exc:
        raise click.ClickException(f"invalid client keys file:\n{exc}") from None
    except ProxyError as exc:
        raise click.ClickException(f"unusable proxy setting: {exc}") from None


@gateway.command()
@config_option
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True)
def spend(config_path: str | None, output: str) -> None:
    """Print what each client key spent, per budget period, from the gateway's Redis.

    Reads the redis and clientKeys sections of the same config the gateway runs with: spend
    lives in Redis (shared by every replica, kept across restarts), budgets in the keys file.
    """
    import redis.asyncio as aioredis  # noqa: PLC0415

    from llm_operator.access.keyfile import load_keyring  # noqa: PLC0415
    from llm_operator.access.shared import spend_entries  # noqa: PLC0415

    config = _load(config_path)
    if config.redis is None:
        raise click.ClickException(
            "this gateway keeps spend in each process (no redis section in its config): see "
            "llmop_gateway_key_spend_usd on its /metrics, or configure redis to keep it")
    budgets: dict[str, Any] = {}
    if config.client_keys is not None:
        try:
            budgets = {k.id: k.budget for k in load_keyring(Path(config.client_keys.file)).keys}
        except KeyringError as exc:
            raise click.ClickException(str(exc)) from None
    settings = config.redis

    async def read() -> dict[tuple[str, str], float]:
        client = aioredis.from_url(settings.url, password=settings.password(),
                                   socket_timeout=5, socket_connect_timeout=5)
        try:
            return await spend_entries(client, settings.key_prefix)
        finally:
            await client.aclose()

    try:
        entries = asyncio.run(read())
    except (OSError, aioredis.RedisError) as exc:
        raise click.ClickException(f"cannot read spend from Redis: {exc}") from None
    now = dt.datetime.now(dt.UTC)
    rows = []
    for (key_id, period), usd in sorted(entries.items()):
        budget = budgets.get(key_id)
        current = budget.usd if budget is not None and \
            period_of(budget.period, now)[0] == period else None
        rows.append({"key": key_id, "period": period, "spentUsd": round(usd, 6),
                     "budgetUsd": current})
    if output == "json":
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("No spend recorded yet.")
        return
    table = Table(box=None)
    for col in ("KEY", "PERIOD", "SPENT USD", "BUDGET USD"):
        table.add_column(col)
    for r in rows:
        budget = "" if r["budgetUsd"] is None else f"{r['budgetUsd']:g}"
        table.add_row(str(r["key"]), str(r["period"]), f"{r['spentUsd']:.4f}", budget)
    Console(width=max(120, Console().width), highlight=False).print(table)
