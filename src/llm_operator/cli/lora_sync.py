"""`llmop lora-sync`: the command line of the LoRA sidecar (llm_operator.lora_sync)."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import click

from llm_operator.lora_sync.sidecar import LoraSync, serve
from llm_operator.profiles.adapters import SYNC_PORT


@click.command(name="lora-sync")
@click.option("--config", "config", required=True, type=click.Path(path_type=Path),
              help="The adapter list (JSON: name, path, optional repo and tokenEnv), "
              "mounted from the model's <name>-lora-adapters ConfigMap.")
@click.option("--engine", default="http://127.0.0.1:8000", show_default=True,
              help="vLLM's base URL, started with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.")
@click.option("--host", default="0.0.0.0", show_default=True, help="Where /ready listens.")
@click.option("--port", default=SYNC_PORT, show_default=True, type=int)
@click.option("--interval", default=5.0, show_default=True, type=float,
              help="Seconds between checks of the list and the engine.")
@click.option("--download-timeout", default=3600.0, show_default=True, type=float,
              help="Seconds one adapter download may take.")
def lora_sync(*, config: Path, engine: str, host: str, port: int, interval: float,
              download_timeout: float) -> None:
    """Keep vLLM's LoRA adapters matching a list, without restarting it (a sidecar).

    \b
    Every few seconds: read the list, ask vLLM which adapters it has (/v1/models), unload
    the ones no longer listed (or now from another path), download Hugging Face adapters
    (hf download, once) and load the missing ones (/v1/load_lora_adapter). A vLLM restart
    is noticed and its adapters loaded again. GET /ready answers 200 once vLLM is up and
    every adapter was tried, with each adapter's state and last error; a failed adapter is
    retried with backoff (5 s doubling to 5 min).
    \b
    Example (what the operator renders next to vLLM):
      llmop lora-sync --config /etc/llmop-lora/adapters.json --engine http://127.0.0.1:8000
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sync = LoraSync(config, engine, download_timeout)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(sync, host, port, interval, stop)

    asyncio.run(main())
