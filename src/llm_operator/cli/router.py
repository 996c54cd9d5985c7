"""`llmop router`: one OpenAI endpoint for every LLMModel in the cluster."""

from __future__ import annotations

import asyncio
import logging
import signal

import click


@click.command(name="router")
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Route the LLMModels of these namespaces (repeatable; default: all).")
@click.option("--host", default="0.0.0.0", show_default=True, help="Listen address.")
@click.option("--port", type=int, default=8080, show_default=True)
@click.option("--hold-seconds", type=click.FloatRange(1, 3600), default=300.0,
              show_default=True, help="How long a request waits for a model with no ready "
              "replica (scaling from zero, starting) before it gets 503.")
@click.option("--keepalive-seconds", type=click.FloatRange(0.1, 120), default=5.0,
              show_default=True, help="A held stream gets an SSE comment this often.")
@click.option("--max-held", type=click.IntRange(1), default=1000, show_default=True,
              help="Requests held at once, all models together.")
@click.option("--max-held-per-model", type=click.IntRange(1), default=100, show_default=True,
              help="Requests held at once for one model.")
@click.option("--scrape-seconds", type=click.FloatRange(0.1, 60), default=2.0,
              show_default=True, help="How often each replica's engine metrics are read "
              "(its queue, for least-load and prefix-hash routing).")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def router(*, namespaces: tuple[str, ...], host: str, port: int, hold_seconds: float,
           keepalive_seconds: float, max_held: int, max_held_per_model: int,
           scrape_seconds: float, log_level: str) -> None:
    """Serve every LLMModel behind one OpenAI endpoint (docs/routing.md).

    \b
    It watches LLMModels and their EndpointSlices (in-cluster credentials in a pod, your
    kubeconfig elsewhere). A model is called by its modelId, its name, or namespace/name:
      - a local model goes to its ready replicas, by spec.routing: least-load (default)
        or prefix-hash (prompts that begin alike share a replica and its prefix cache);
      - a remote model goes to its gateway (keys, limits and spend are applied there);
      - a model with no ready replica (scaled to zero, starting) holds the request until
        one is ready; a stream gets ": waiting for model (...)" keepalives meanwhile.
    GET /scale/<namespace>/<name> and llmop_router_pending_requests on /metrics say how
    many requests wait for each model: KEDA scales on them (settings router.enabled).
    \b
    Example:
      llmop router -n ai-models --port 8080
      curl localhost:8080/v1/chat/completions -d '{"model": "google/gemma-4-31b-it", ...}'
    """
    from llm_operator.kube import Kube, connection  # noqa: PLC0415
    from llm_operator.router.app import Router, serve  # noqa: PLC0415
    from llm_operator.router.routes import Options  # noqa: PLC0415

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        async with Kube(connection()) as kube:
            routing = Router(kube, namespaces, options=Options(hold_seconds, keepalive_seconds),
                             scrape_seconds=scrape_seconds, max_held=max_held,
                             max_held_per_route=max_held_per_model)
            await serve(routing, host, port, stop=stop)

    asyncio.run(main())
