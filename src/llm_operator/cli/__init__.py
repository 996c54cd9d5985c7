"""Command-line entry points (`llmop`), thin over the pure packages."""
