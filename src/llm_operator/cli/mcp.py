"""`llmop mcp`: every exposed model as an MCP tool, from the cluster or from YAML files."""

from __future__ import annotations

from pathlib import Path

import click


@click.command(name="mcp")
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Publish LLMModels of this namespace from the Kubernetes watch (repeatable).")
@click.option("-A", "--all-namespaces", is_flag=True,
              help="Publish LLMModels of every namespace from the Kubernetes watch.")
@click.option("-f", "--files", "files_dir", type=click.Path(exists=True, file_okay=False,
              path_type=Path), metavar="DIR",
              help="Publish LLMModel YAML from DIR, re-read when a file changes.")
@click.option("--status-file", type=click.Path(dir_okay=False, path_type=Path), metavar="FILE",
              help="YAML map of model name -> status for --files (the local runtime writes it).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Listen address (0.0.0.0 in a pod).")
@click.option("--port", type=int, default=3000, show_default=True)
@click.option("--service", "services", multiple=True, metavar="NAME.NAMESPACE",
              envvar="LLMOP_MCP_SERVICE",
              help="The Service clients use in-cluster; its DNS names are accepted as Host "
              "and Origin (DNS-rebinding protection; localhost is always accepted).")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="HOST",
              help="Another Host/Origin name to accept, e.g. an ingress name (repeatable).")
@click.option("--admin-token-file", type=click.Path(dir_okay=False, path_type=Path),
              envvar="LLMOP_MCP_ADMIN_TOKEN_FILE", metavar="FILE",
              help="Enable the /admin/tools API, authenticated by the bearer token in FILE "
              "(re-read on every request, so rotation needs no restart).")
@click.option("--admin-endpoint-host", "admin_endpoint_hosts", multiple=True, metavar="HOST",
              help="A host outside the cluster that admin pushes may point at (repeatable; "
              "'.example.com' allows a suffix). Service names and loopback are always "
              "allowed; link-local and cloud metadata addresses never are.")
@click.option("--admin-configmap", metavar="NAMESPACE/NAME",
              help="Keep admin registrations in this ConfigMap (created on the first one), so "
              "every replica serves them and they survive restarts. Needs --namespace or "
              "--all-namespaces; without it they live in this process only.")
@click.option("--client-keys", "client_keys_file", metavar="FILE", envvar="LLMOP_MCP_CLIENT_KEYS",
              type=click.Path(dir_okay=False, path_type=Path),
              help="Require a bearer token on /mcp: a keys file (`llmop keys`, the gateway's "
              "format), re-read when it changes; each key's tools/models and "
              "requestsPerMinute apply to its tool calls.")
@click.option("--oauth-issuer", metavar="URL",
              help="Also accept OAuth 2.1 access tokens (JWT) from this authorization "
              "server, and publish RFC 9728 metadata naming it. Needs --resource-url.")
@click.option("--resource-url", metavar="URL",
              help="This server's public /mcp URL: the audience OAuth tokens must carry.")
@click.option("--page-size", type=click.IntRange(1, 1000), default=100, show_default=True,
              help="Tools per tools/list page.")
@click.option("--sdk-baseline", is_flag=True, hidden=True,
              help="bench/mcp's baseline: no listing replay, SSE answers in sessions.")
@click.option("--call-timeout", type=float, default=300.0, show_default=True, metavar="SECONDS",
              help="How long a tool call waits for the model.")
@click.option("--max-concurrent-calls", type=click.IntRange(1), default=256, show_default=True,
              help="Calls one model tool answers at a time; more wait for a slot "
              "(llmop_mcp_tool_calls_queued), within --call-timeout.")
@click.option("--sessions-per-client", type=click.IntRange(1), default=32, show_default=True,
              help="Stateful (2025-11-25) sessions one client address may hold; more get 429.")
@click.option("--session-idle-seconds", type=click.FloatRange(1), default=300.0,
              show_default=True, metavar="SECONDS",
              help="A session with no request in flight and no open stream this long ends.")
@click.option("--drain-seconds", type=click.IntRange(0, 3600), default=25,
              show_default=True, metavar="SECONDS",
              help="On SIGTERM or Ctrl-C: how long tool calls and open streams in flight "
              "get to finish before they are cancelled and the server exits.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def mcp(namespaces: tuple[str, ...], *, all_namespaces: bool, files_dir: Path | None,
        status_file: Path | None, host: str, port: int, services: tuple[str, ...],
        allowed_hosts: tuple[str, ...], admin_token_file: Path | None,
        admin_endpoint_hosts: tuple[str, ...], admin_configmap: str | None,
        client_keys_file: Path | None, oauth_issuer: str | None, resource_url: str | None,
        page_size: int, sdk_baseline: bool, call_timeout: float,
        max_concurrent_calls: int, sessions_per_client: int, session_idle_seconds: float,
        drain_seconds: int, log_level: str) -> None:
    """Serve every exposed model as an MCP tool (Streamable HTTP at /mcp).

    A model is a tool when spec.mcpExposure.enabled is true and its phase is Ready or
    Proxying. Clients of protocol 2026-07-28 and 2025-11-25 are both served and told when
    the tool list changes; plain JSON-RPC POSTs (curl) work too. Also serves /health,
    /ready and, with --admin-token-file, /admin/tools.

    \b
    Examples:
      llmop mcp -n ai-models                      models from the cluster (kubeconfig)
      llmop mcp -f models/ --status-file status.yaml   models from YAML files
      llmop mcp -A --host 0.0.0.0 --service mcp-server.ai-models   (in a pod)
    """
    import asyncio  # noqa: PLC0415 - the server's dependencies only for this command

    from llm_operator.kube import connection  # noqa: PLC0415
    from llm_operator.mcp_server.run import service  # noqa: PLC0415
    from llm_operator.mcp_server.settings import McpSettings, service_hosts  # noqa: PLC0415

    if namespaces and all_namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    if oauth_issuer and not resource_url:
        raise click.UsageError("--oauth-issuer needs --resource-url: this server's public "
                               "/mcp URL, which the issuer's tokens must name as audience")
    if not (namespaces or all_namespaces or files_dir):
        raise click.UsageError("say where models come from: --namespace NS / --all-namespaces "
                               "(Kubernetes) and/or --files DIR")
    names = list(allowed_hosts)
    for svc in services:
        name, _, ns = svc.partition(".")
        names += service_hosts(name, [ns] if ns else [])
    from llm_operator.mcp_server.requestids import configure_logging  # noqa: PLC0415

    configure_logging(log_level)
    settings = McpSettings(host=host, port=port, allowed_hosts=tuple(names),
                           page_size=page_size, call_timeout=call_timeout,
                           admin_token_file=admin_token_file,
                           admin_endpoint_hosts=admin_endpoint_hosts,
                           max_concurrent_calls=max_concurrent_calls,
                           sessions_per_client=sessions_per_client,
                           session_idle_seconds=session_idle_seconds,
                           drain_seconds=drain_seconds,
                           client_keys_file=client_keys_file, oauth_issuer=oauth_issuer,
                           resource_url=resource_url, listing_cache=not sdk_baseline,
                           session_json=not sdk_baseline)
    use_kube = bool(namespaces or all_namespaces)
    store: tuple[str, str] | None = None
    if admin_configmap is not None:
        store_ns, _, store_name = admin_configmap.partition("/")
        if not (store_ns and store_name) or not use_kube:
            raise click.UsageError("--admin-configmap takes NAMESPACE/NAME and needs "
                                   "--namespace or --all-namespaces")
        store = (store_ns, store_name)

    async def run() -> None:
        async with service(settings, kube=connection() if use_kube else None,
                           namespaces=list(namespaces), files=files_dir,
                           status_file=status_file, admin_configmap=store) as svc:
            await svc.serve(log_level=log_level)

    from llm_operator.access.keyring import KeyringError  # noqa: PLC0415

    try:
        asyncio.run(run())
    except KeyringError as exc:
        raise click.ClickException(f"invalid client keys file:\n{exc}") from None
