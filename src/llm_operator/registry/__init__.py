"""Querying models: label selectors plus numeric filters, shared by the CLI and MCP."""
