"""Client access: keys the gateway and the MCP server accept, their allowances and spend."""
