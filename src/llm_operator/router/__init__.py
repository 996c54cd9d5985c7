"""The router: one OpenAI endpoint for every model in the cluster (`llmop router`)."""
