"""The OpenAI Batch API on our own models: input files, batches, their runs."""
