"""The MCP server (`llmop mcp`): every exposed LLMModel as a tool for AI agents."""
