"""How the MCP server listens, calls models and guards /mcp (`llmop mcp --help` sets each)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mcp.server.transport_security import TransportSecuritySettings

from llm_operator.mcp_server.sessions import DEFAULT_IDLE_SECONDS, DEFAULT_PER_CLIENT

LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


@dataclass(frozen=True)
class McpSettings:
    """How the server listens and calls models (``llmop mcp --help`` sets each)."""

    host: str = "127.0.0.1"
    port: int = 3000
    allowed_hosts: Sequence[str] = ()  # extra Host names (in-cluster service names)
    page_size: int = 100
    call_timeout: float = 300.0
    admin_token_file: Path | None = None
    admin_endpoint_hosts: Sequence[str] = ()  # hosts (".suffix" too) pushes may point at
    max_concurrent_calls: int = 256  # per model tool; more wait (llmop_mcp_tool_calls_queued)
    sessions_per_client: int = DEFAULT_PER_CLIENT  # 2025-era sessions one address may hold
    session_idle_seconds: float = DEFAULT_IDLE_SECONDS  # no request, no open stream: ended
    drain_seconds: int = 25  # after SIGTERM: calls and streams in flight, then cancelled
    client_keys_file: Path | None = None  # bearer tokens (the gateway's keys file format)
    oauth_issuer: str | None = None  # accept JWT access tokens from this issuer
    resource_url: str | None = None  # this server's public /mcp URL (the tokens' audience)
    # Off only for bench/mcp's baseline: the SDK shaping every listing, SSE session answers.
    listing_cache: bool = True
    session_json: bool = True

    def transport_security(self) -> TransportSecuritySettings:
        """DNS-rebinding protection: only these Host and Origin values reach /mcp."""
        names = [*LOCAL_HOSTS, *self.allowed_hosts]
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[h for n in names for h in (n, f"{n}:*")],
            allowed_origins=[o for n in names for scheme in ("http", "https")
                             for o in (f"{scheme}://{n}", f"{scheme}://{n}:*")])


def service_hosts(service: str, namespaces: Sequence[str], cluster_domain: str = "cluster.local"
                  ) -> list[str]:
    """Every name a client inside the cluster may use for the MCP Service."""
    names = [service]
    for ns in namespaces:
        names += [f"{service}.{ns}", f"{service}.{ns}.svc", f"{service}.{ns}.svc.{cluster_domain}"]
    return names
