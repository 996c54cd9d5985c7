"""Optional pushes to the MCP server's admin API: register serving models, deregister deleted."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import aiohttp

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.settings import McpPush

log = logging.getLogger(__name__)


class PushError(RuntimeError):
    """The admin API could not be reached or refused the request (no token in the message)."""


def payload(model: LLMModel) -> dict[str, Any] | None:
    """The guide's admin payload for a serving, exposed model; None when there is none."""
    exposure, status = model.spec.mcp_exposure, model.status
    if not exposure.enabled or not exposure.tool_name or status is None or not status.endpoint \
            or status.phase not in ("Ready", "Proxying"):
        return None
    return {"name": exposure.tool_name, "description": exposure.tool_description or "",
            "endpoint": status.endpoint, "modelId": model.spec.model_id,
            "domains": list(model.spec.domains or []),
            "contextWindowK": model.spec.context_window_k,
            "supportsThinking": model.spec.supports_thinking}


async def _send(http: aiohttp.ClientSession, push: McpPush, method: str, tool: str,
                body: dict[str, Any] | None = None) -> int:
    assert push.admin_url is not None
    try:
        token = Path(push.token_file).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise PushError(f"cannot read the MCP admin token file {push.token_file}: "
                        f"{exc.strerror}") from None
    url = f"{push.admin_url.rstrip('/')}/admin/tools/{tool}"
    try:
        async with http.request(method, url, json=body,
                                headers={"Authorization": f"Bearer {token}"},
                                timeout=aiohttp.ClientTimeout(total=push.timeout_seconds)) as r:
            if r.status >= 500 or r.status in (401, 403):
                raise PushError(f"MCP admin API answered HTTP {r.status} to {method} {tool}")
            return r.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise PushError(f"MCP admin API unreachable ({type(exc).__name__})") from None


async def register(http: aiohttp.ClientSession, push: McpPush, body: dict[str, Any]) -> None:
    status = await _send(http, push, "PUT", body["name"], body)
    if status >= 400:
        raise PushError(f"MCP admin API refused tool {body['name']} (HTTP {status})")


async def deregister(http: aiohttp.ClientSession, push: McpPush, tool: str) -> None:
    """Remove the tool; an unknown tool (404) is already gone."""
    await _send(http, push, "DELETE", tool)
