"""The OpenAI-compatible gateway: key injection, rate limits, retries, streaming, metrics."""
