"""The single-machine runtime: `llmop up` serves LLMModel YAML with no cluster."""
