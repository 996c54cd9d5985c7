"""`llmop router`: one OpenAI endpoint for every LLMModel in the cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from llm_operator.access.admin_token import AdminToken
    from llm_operator.access.oidc import OidcSettings


@click.command(name="router")
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Route the LLMModels of these namespaces (repeatable; default: all).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Listen address.")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--hold-seconds", type=click.FloatRange(1, 3600), default=300.0,
              show_default=True, help="How long a request waits for a model with no ready "
              "replica (scaling from zero, starting) before it gets 503.")
@click.option("--drain-seconds", type=click.FloatRange(0, 3600), default=320.0,
              show_default=True, help="On SIGTERM the router stops listening and gives the "
              "requests in flight (held ones included) this long; then it cancels them and "
              "exits. Keep it below the pod's terminationGracePeriodSeconds (config/router: "
              "330).")
@click.option("--keepalive-seconds", type=click.FloatRange(0.1, 120), default=5.0,
              show_default=True, help="A held stream gets an SSE comment this often.")
@click.option("--max-held", type=click.IntRange(1), default=1000, show_default=True,
              help="Requests held at once, all models together.")
@click.option("--max-held-per-model", type=click.IntRange(1), default=100, show_default=True,
              help="Requests held at once for one model.")
@click.option("--scrape-seconds", type=click.FloatRange(0.1, 60), default=2.0,
              show_default=True, help="How often each replica's engine metrics are read "
              "(its queue, for least-load and the prefix strategies' load bound).")
@click.option("--keys-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="Require a client key on every /v1 request: the gateway's keys file "
              "(llmop keys new; e.g. a mounted Secret, re-read when it changes). Each key's "
              "models globs match the name the client asks for; /v1/models lists those.")
@click.option("--admin-token-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="The web console's admin token (a mounted Secret; at least 16 "
              "characters, e.g. `openssl rand -hex 32`): signed in with it, /ui/keys lists "
              "every key and creates, disables and rotates keys, written to --keys-secret "
              "or else to the keys file itself (docs/console.md). Needs client keys.")
@click.option("--keys-secret", metavar="NAMESPACE/NAME",
              help="The Secret the keys file is mounted from (its keys.yaml): where the "
              "console writes keys. config/router-keys sets it.")
@click.option("--oidc-issuer", metavar="URL", help="Sign in to the web console at this "
              "OpenID Connect issuer (exactly as its discovery document names itself, e.g. "
              "https://dex.example.com): every visitor then signs in, there or with a key. "
              "The issuer must send browsers back to https://ROUTER/ui/oidc/callback "
              "(docs/console.md).")
@click.option("--oidc-client-id", metavar="ID", help="The console's client id at the issuer.")
@click.option("--oidc-client-secret-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="The client's secret (a mounted Secret), read at start.")
@click.option("--oidc-session-key-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="The key that signs the console's session cookies (a mounted Secret, "
              "the same for every replica; at least 32 characters, e.g. `openssl rand "
              "-hex 32`), read at start. A new key ends every session.")
@click.option("--oidc-scopes", default="openid email profile", show_default=True,
              metavar="SCOPES", help="The scopes asked for, space-separated (add groups "
              "where the issuer sends the groups claim only when asked, as Dex does).")
@click.option("--oidc-admin", "oidc_admins", multiple=True, metavar="KIND:VALUE",
              help="Who administers keys once signed in (repeatable): email:ADDRESS (an "
              "email the issuer says it verified), group:NAME (in the groups claim) or "
              "sub:SUBJECT.")
@click.option("--oidc-allow", "oidc_allowed", multiple=True, metavar="KIND:VALUE",
              help="Who may look once signed in (repeatable, the kinds of --oidc-admin, "
              "or `everyone`: each person the issuer signs in, which at a public issuer "
              "such as Google is anyone with an account). Needed with --oidc-issuer.")
@click.option("--oidc-redirect-url", metavar="URL", help="Where the issuer sends browsers "
              "back (default: /ui/oidc/callback on the host the browser asked for).")
@click.option("--redis-url", metavar="URL", help="Share the keys' rate limits and spend "
              "across router replicas, e.g. redis://redis.llm-operator-system.svc:6379/0.")
@click.option("--redis-password-file", type=click.Path(dir_okay=False), metavar="PATH",
              help="Redis's password, e.g. a mounted Secret.")
@click.option("--settings", "settings_file", type=click.Path(dir_okay=False), metavar="PATH",
              help="YAML of the router's gateway settings: flowControl (priority bands, "
              "objectives, perReplicaConcurrency; docs/flow-control.md) and tracing "
              "(OpenTelemetry over OTLP/HTTP; docs/tracing.md) and batch (OpenAI's Batch "
              "API, kept in --redis-url's Redis; docs/batch.md). Unset: flow control on "
              "with the interactive, standard and batch bands; traces only where OTEL_* "
              "say; no Batch API.")
@click.option("--peers-service", metavar="NAMESPACE/NAME",
              help="The router's own Service: its ready replicas (each named by its pod's "
              "HOSTNAME) share the models, each holding some models' queues; a request "
              "landing on another replica is passed to the one holding its model's, so "
              "band order and fair shares hold across replicas (docs/flow-control.md). "
              "config/router sets it.")
@click.option("--batch-lease", metavar="NAMESPACE/NAME",
              help="Serve OpenAI's Batch API (docs/batch.md; needs --redis-url, where "
              "every replica keeps files, batches and results), and elect the one replica "
              "running batches with this Lease (its identity: the pod's HOSTNAME). "
              "config/router-batch sets it.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def router(*, namespaces: tuple[str, ...], host: str, port: int, hold_seconds: float,
           drain_seconds: float,
           keepalive_seconds: float, max_held: int, max_held_per_model: int,
           scrape_seconds: float, keys_file: str | None, redis_url: str | None,
           redis_password_file: str | None, settings_file: str | None,
           peers_service: str | None, batch_lease: str | None, admin_token_file: str | None,
           keys_secret: str | None, oidc_issuer: str | None, oidc_client_id: str | None,
           oidc_client_secret_file: str | None, oidc_session_key_file: str | None,
           oidc_scopes: str,
           oidc_admins: tuple[str, ...], oidc_allowed: tuple[str, ...],
           oidc_redirect_url: str | None, log_level: str) -> None:
    """Serve every LLMModel behind one OpenAI endpoint (docs/routing.md).

    \b
    It watches LLMModels and their EndpointSlices (in-cluster credentials in a pod, your
    kubeconfig elsewhere). A model is called by its modelId, namespace/name, or its name:
      - a local model goes to its ready replicas, by spec.routing: least-load (default),
        prefix-hash (prompts that begin alike share a replica and its prefix cache) or
        prefix-cache (the replica that was sent most of the prompt, e.g. a conversation's
        earlier turns);
      - a remote model goes to its gateway (keys, limits and spend are applied there);
      - a model with no ready replica (scaled to zero, starting) holds the request until
        one is ready; a stream gets ": waiting for model (...)" keepalives meanwhile;
      - once every slot of a model's replicas is busy, requests wait in the router by
        priority band (x-gateway-inference-objective, or the client key's band) and fair
        share (x-gateway-inference-fairness-id, or the client key), bounded in length and
        wait (--settings, docs/flow-control.md).
    With --keys-file, only listed client keys get in, each to the models its globs
    allow, within its rate limits (docs/gateway.md); unset, keep the router behind its
    NetworkPolicy (config/router).
    The web console is at /ui/ (docs/console.md): a key sees its models and its use; with
    --admin-token-file, the admin token sees every key and creates, disables and rotates
    them. With --oidc-issuer, people sign in at your OpenID Connect issuer: those
    --oidc-allow names see every model, and an --oidc-admin administers keys as the admin
    token does.
    GET /scale/<namespace>/<name> and llmop_router_pending_requests on /metrics say how
    many requests wait for each model: KEDA scales on them (settings router.enabled).
    \b
    Example:
      llmop router -n ai-models --port 8080
      llmop router --keys-file /etc/llmop/keys/keys.yaml --redis-url redis://redis:6379/0
      llmop router --settings router.yaml   # flowControl, tracing (see config/router/settings.yaml)
      OTEL_EXPORTER_OTLP_ENDPOINT=http://otel-collector:4318 llmop router   # traces
      llmop router --keys-file keys.yaml --oidc-issuer https://dex.example.com \\
        --oidc-client-id llmop-console --oidc-client-secret-file /etc/llmop/oidc/secret \\
        --oidc-session-key-file /etc/llmop/oidc/session-key \\
        --oidc-allow group:ml-team --oidc-admin group:llm-admins
      curl localhost:8080/v1/chat/completions -d '{"model": "google/gemma-4-31b-it", ...}'
    """
    from llm_operator.access.keyfile import load_keyring  # noqa: PLC0415
    from llm_operator.access.keyring import KeyringError  # noqa: PLC0415
    from llm_operator.gateway.settings.config import ConfigError, parse_config  # noqa: PLC0415
    from llm_operator.gateway.upstream.proxies import ProxyError, proxy_settings  # noqa: PLC0415
    from llm_operator.kube import Kube, connection  # noqa: PLC0415
    from llm_operator.leader import LeaseTerms  # noqa: PLC0415
    from llm_operator.router.app import Router, serve  # noqa: PLC0415
    from llm_operator.router.routes import Options  # noqa: PLC0415

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings: dict[str, object] = {}
    if settings_file is not None:
        settings.update(_settings(Path(settings_file)))
    if keys_file is not None:
        try:
            load_keyring(Path(keys_file))  # before connecting: a bad file is the user's to fix
        except KeyringError as exc:
            raise click.ClickException(f"invalid client keys file:\n{exc}") from None
        settings["clientKeys"] = {"file": keys_file}
    if redis_url is not None:
        settings["redis"] = {"url": redis_url, **(
            {"passwordFile": redis_password_file} if redis_password_file else {})}
    elif redis_password_file is not None:
        raise click.UsageError("--redis-password-file needs --redis-url")
    oidc = _oidc(oidc_issuer, client_id=oidc_client_id, secret_file=oidc_client_secret_file,
                 session_key_file=oidc_session_key_file, scopes=oidc_scopes,
                 admins=oidc_admins, allowed=oidc_allowed, redirect_url=oidc_redirect_url)
    admin, secret = _key_admin(admin_token_file, keys_secret, settings,
                               oidc is not None and bool(oidc.admins))
    peers = None if peers_service is None else _named(
        "--peers-service", peers_service, "llm-operator-system/llmop-router")
    lease = None
    if batch_lease is not None:
        namespace, name = _named("--batch-lease", batch_lease,
                                 "llm-operator-system/llmop-router-batches")
        lease = LeaseTerms(namespace, os.environ.get("HOSTNAME") or socket.gethostname(),
                           name)
        batch = settings.get("batch")
        settings["batch"] = {**(batch if isinstance(batch, dict) else {}), "enabled": True}
    try:
        parse_config({"routes": [], **settings}, settings_file or "router settings",
                     empty_ok=True)
        proxy_settings(os.environ)  # what the gateway it runs reads at start
    except (ConfigError, ProxyError) as exc:
        raise click.UsageError(str(exc)) from None

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Kube(connection()) as kube:
            routing = Router(kube, namespaces, options=Options(hold_seconds, keepalive_seconds),
                             scrape_seconds=scrape_seconds, max_held=max_held,
                             max_held_per_route=max_held_per_model, settings=settings,
                             peers=peers, port=port, batch_lease=lease,
                             admin_token=None if admin is None else admin.matches,
                             keys_secret=secret, oidc=oidc)
            await serve(routing, host, port, stop=stop, drain_seconds=drain_seconds)

    asyncio.run(main())


SETTINGS_SECTIONS = ("flowControl", "tracing", "batch")


def _key_admin(token_file: str | None, keys_secret: str | None, settings: dict[str, object],
               oidc_admins: bool) -> tuple[AdminToken | None, tuple[str, str] | None]:
    """The console's admin token and the Secret it writes keys to; UsageError if unusable."""
    from llm_operator.access.admin_token import AdminToken, AdminTokenError  # noqa: PLC0415

    if token_file is None and not oidc_admins:
        if keys_secret is not None:
            raise click.UsageError("--keys-secret is where the console's administrator "
                                   "writes keys: give --admin-token-file or --oidc-admin too")
        return None, None
    if "clientKeys" not in settings:
        given = "--admin-token-file" if token_file is not None else "--oidc-admin"
        raise click.UsageError(f"{given} administers client keys: give --keys-file (or "
                               "clientKeys in --settings) too")
    admin = None
    if token_file is not None:
        try:
            admin = AdminToken(Path(token_file))
        except AdminTokenError as exc:
            raise click.UsageError(f"--admin-token-file {exc}") from None
    return admin, None if keys_secret is None else _named(
        "--keys-secret", keys_secret, "llm-operator-system/llmop-router-keys")


def _oidc(issuer: str | None, *, client_id: str | None, secret_file: str | None,
          session_key_file: str | None, scopes: str, admins: tuple[str, ...],
          allowed: tuple[str, ...], redirect_url: str | None) -> OidcSettings | None:
    """The console's OpenID Connect sign-in; UsageError naming the option that is wrong."""
    from llm_operator.access.oidc import OidcError, OidcSettings, rules  # noqa: PLC0415

    if issuer is None:
        given = [name for name, value in (
            ("--oidc-client-id", client_id), ("--oidc-client-secret-file", secret_file),
            ("--oidc-session-key-file", session_key_file),
            ("--oidc-admin", admins), ("--oidc-allow", allowed),
            ("--oidc-redirect-url", redirect_url)) if value]
        if given:
            raise click.UsageError(f"{', '.join(given)}: sign-in at an OpenID Connect "
                                   "issuer needs --oidc-issuer too")
        return None
    if client_id is None or secret_file is None or session_key_file is None:
        raise click.UsageError("--oidc-issuer needs --oidc-client-id and "
                               "--oidc-client-secret-file (the client the issuer registered "
                               "for the console) and --oidc-session-key-file")
    secret = _read("--oidc-client-secret-file", secret_file)
    session_key = _read("--oidc-session-key-file", session_key_file)
    try:
        return OidcSettings(issuer, client_id, secret, session_key.encode(),
                            allowed=rules(allowed), admins=rules(admins),
                            scopes=tuple(scopes.split()), redirect_url=redirect_url)
    except OidcError as exc:
        raise click.UsageError(f"OpenID Connect sign-in: {exc}") from None


def _read(option: str, path: str) -> str:
    """The file's text, stripped; UsageError naming the option where it cannot be read."""
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise click.UsageError(f"{option} {path}: {exc.strerror or exc}") from None


def _named(option: str, value: str, example: str) -> tuple[str, str]:
    """NAMESPACE/NAME; UsageError naming the option otherwise."""
    namespace, _, name = value.partition("/")
    if not namespace or not name or "/" in name:
        raise click.UsageError(f"{option} {value!r}: give NAMESPACE/NAME, e.g. {example}")
    return namespace, name


def _settings(path: Path) -> dict[str, object]:
    """The settings file's sections; ClickException naming what is wrong."""
    from llm_operator.gateway.settings.config import ConfigError, read_yaml  # noqa: PLC0415

    try:
        data = read_yaml(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise click.ClickException(f"{path}: expected a mapping of settings "
                                   f"({', '.join(SETTINGS_SECTIONS)})")
    unknown = sorted(set(data) - set(SETTINGS_SECTIONS))
    if unknown:
        raise click.ClickException(f"{path}: {', '.join(unknown)}: unknown setting; the "
                                   f"router's are {', '.join(SETTINGS_SECTIONS)}")
    return data
