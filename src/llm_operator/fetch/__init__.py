"""Downloads into the model cache: the init container's and lora-sync's, each failure named."""
