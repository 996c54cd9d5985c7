"""vLLM's LoRA sidecar (`llmop lora-sync`): a program of its own beside the engine."""
