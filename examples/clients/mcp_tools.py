"""List llm-operator's MCP tools and call one, with the official MCP Python SDK (mcp 2.x).

    .venv/bin/python examples/clients/mcp_tools.py                      # llmop up's server
    .venv/bin/python examples/clients/mcp_tools.py http://host:3000/mcp  # any other
"""

from __future__ import annotations

import asyncio
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.types import TextContent


async def main(url: str) -> None:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        tools = (await mcp.list_tools()).tools
        print("tools:", ", ".join(t.name for t in tools))
        listed = await mcp.call_tool("list_available_models", {})
        for model in (listed.structured_content or {}).get("models", []):
            print(f"  {model['toolName']}: {model['modelId']} ({model['status']})")
        model_tools = [t.name for t in tools if t.name != "list_available_models"]
        if not model_tools:
            print("no model is serving yet")
            return
        result = await mcp.call_tool(model_tools[0], {
            "messages": [{"role": "user", "content": "What is the capital of France?"}],
            "max_tokens": 24, "temperature": 0})
        text = next((c.text for c in result.content if isinstance(c, TextContent)), "")
        print(f"{model_tools[0]} answered{' (error)' if result.is_error else ''}: {text!r}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:3000/mcp"))
