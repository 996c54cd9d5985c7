"""What /mcp checks of a POSTed body before the SDK sees it: its size and its JSON-RPC envelope."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.types import Receive


def envelope_problem(body: bytes) -> tuple[int, str] | None:
    """Why a POSTed body is not one JSON-RPC message (code, short message); None if it is.

    Checked before the SDK sees it: its own answers to ``{}`` or a batch named pydantic
    internals, and a request with ``"id": null`` got a silent 202.
    """
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return types.PARSE_ERROR, "Parse error: the body is not JSON"
    if isinstance(message, list):
        return types.INVALID_REQUEST, ("JSON-RPC batches are not supported (MCP removed them "
                                       "in 2025-06-18): send one message per request")
    if not isinstance(message, dict):
        return types.INVALID_REQUEST, "a JSON-RPC message must be a JSON object"
    if message.get("jsonrpc") != "2.0":
        return types.INVALID_REQUEST, 'the message needs "jsonrpc": "2.0"'
    if "id" in message and (isinstance(message["id"], bool)
                            or not isinstance(message["id"], str | int)):
        return types.INVALID_REQUEST, "id must be a string or an integer (MCP forbids null)"
    if "method" in message:
        if not isinstance(message["method"], str) or not message["method"]:
            return types.INVALID_REQUEST, "method must be a non-empty string"
    elif "id" not in message or not ("result" in message or "error" in message):
        return types.INVALID_REQUEST, ("the message is neither a request (method), a "
                                       "notification, nor a response (id with result or error)")
    return None


async def read_body(receive: Receive, limit: int = DEFAULT_MAX_REQUEST_BODY_SIZE
                    ) -> bytes | None:
    """The whole body, or None once it passes ``limit`` bytes (not read further)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that hands the SDK the body already read, then the connection's own."""
    sent = False

    async def replay() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
