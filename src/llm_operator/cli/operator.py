"""`llmop operator`: run the operator's reconcile loops against a cluster."""

from __future__ import annotations

import logging

import click

from llm_operator.cli.outcomes import settings_from, settings_option


@click.command()
@click.option("-n", "--namespace", "namespaces", multiple=True, metavar="NS",
              help="Watch only these namespaces (repeatable).")
@click.option("-A", "--all-namespaces", is_flag=True, help="Watch every namespace (default).")
@settings_option
@click.option("--resync", type=float, default=60.0, show_default=True, metavar="SECONDS",
              help="Re-reconcile every model this often, repairing drift. Changes to a "
              "model, its children or its Pods are reconciled as they happen.")
@click.option("--workers", type=click.IntRange(1, 64), default=4, show_default=True,
              help="Models reconciled at once (never two reconciles of one model).")
@click.option("--liveness", metavar="URL",
              help="Serve a health endpoint, e.g. http://0.0.0.0:8080/healthz (for probes).")
@click.option("--metrics-port", type=int, metavar="PORT",
              help="Serve the operator's Prometheus metrics on this port (/metrics).")
@click.option("--leader-elect", is_flag=True,
              help="Run as one of several replicas: only the holder of a Lease reconciles; "
              "the others stand by and take over within ~15 s if it goes away.")
@click.option("--lease-namespace", envvar="POD_NAMESPACE", default="llm-operator-system",
              show_default=True, help="Namespace of the Lease (in a pod: $POD_NAMESPACE).")
@click.option("--lease-name", default="llm-operator", show_default=True)
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default="info", show_default=True)
def operator(namespaces: tuple[str, ...], *, all_namespaces: bool, settings_path: str | None,
             resync: float, workers: int, liveness: str | None, metrics_port: int | None,
             leader_elect: bool, lease_namespace: str, lease_name: str,
             log_level: str) -> None:
    """Run the operator: reconcile LLMModels into running, observed workloads.

    Uses in-cluster credentials inside a pod and your kubeconfig elsewhere. For each
    LLMModel it checks placement and Secrets, applies the rendered children with server-side
    apply, prunes the ones no longer wanted, keeps discovery labels exact, and writes the
    status observed from the model's Deployment and Pods. It reads the cluster from watches
    (models, their children, their Pods) and writes only what differs from what it owns.
    """
    import asyncio  # noqa: PLC0415 - the operator's dependencies only for this command
    import os  # noqa: PLC0415
    import signal  # noqa: PLC0415
    import socket  # noqa: PLC0415

    from llm_operator.kube import connection  # noqa: PLC0415
    from llm_operator.leader import LeaseTerms  # noqa: PLC0415
    from llm_operator.operator.run import run_operator  # noqa: PLC0415

    if namespaces and all_namespaces:
        raise click.UsageError("use either --namespace or --all-namespaces")
    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = settings_from(settings_path)
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    leader = LeaseTerms(namespace=lease_namespace, identity=identity, name=lease_name) \
        if leader_elect else None

    async def main() -> None:
        # In a container the operator is PID 1, which ignores SIGTERM unless it handles it:
        # a deleted leader pod then renewed its Lease until SIGKILL, 30 s, and the standby
        # waited out the Lease on top. On SIGTERM it stops and hands the Lease back.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await run_operator(connection(), settings, namespaces=namespaces,
                           resync_seconds=resync, workers=workers, liveness=liveness,
                           metrics_port=metrics_port, leader=leader, stop=stop)

    asyncio.run(main())
