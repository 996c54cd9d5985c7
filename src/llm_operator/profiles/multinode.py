"""How vLLM and SGLang serve one replica over several pods: the leader's and workers' commands.

The pods are a LeaderWorkerSet group: the LeaderWorkerSet controller gives every pod
LWS_LEADER_ADDRESS (the leader's stable DNS name), LWS_GROUP_SIZE and LWS_WORKER_INDEX.

vLLM on GPUs runs on a Ray cluster (its documented multi-node shape): the leader starts the
Ray head, waits until every worker has joined, then serves with tensor parallel inside each
node and pipeline parallel across them; each worker joins the head and blocks. vLLM on CPU
cannot use Ray (its Ray executor places GPU workers only): every pod runs vLLM's own
multiprocessing backend with its node rank, the leader (rank 0) serves HTTP and holds the
group's rendezvous (--master-addr), the workers run `vllm serve --headless`.
SGLang needs no Ray: every pod runs the server with its node rank, the leader's (rank 0)
answers HTTP, and tensor parallel spans every card of every node.
"""

from __future__ import annotations

from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.profiles.engines import TP_ARGS, Serve

RAY_PORT = 6379
SGLANG_DIST_PORT = 20000
VLLM_MASTER_PORT = 29501  # torch.distributed's rendezvous on the leader (vLLM's mp backend)
LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"  # expanded by the kubelet from the pod's env
WORKER_INDEX = "$(LWS_WORKER_INDEX)"

# The leader: the Ray head, then the server once all LWS_GROUP_SIZE nodes have joined
# (vLLM places its pipeline stages on the nodes Ray knows when it starts). The startup
# probe bounds the wait: a worker that never joins restarts the group.
RAY_LEADER = (
    "set -eu\n"
    f"ray start --head --port={RAY_PORT} --disable-usage-stats\n"
    "until python3 -c 'import os, ray; ray.init(address=\"auto\", logging_level=\"ERROR\"); "
    "raise SystemExit(sum(n[\"Alive\"] for n in ray.nodes()) "
    "< int(os.environ[\"LWS_GROUP_SIZE\"]))'"
    "; do echo \"waiting for $LWS_GROUP_SIZE Ray nodes\"; sleep 5; done\n"
    'exec "$@"\n'
)
# A worker: join the head (retrying until it is up) and stay in the foreground.
RAY_WORKER = (
    f'until ray start --block --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" '
    "--disable-usage-stats; do sleep 5; done\n"
)


def _without_tp(args: tuple[str, ...]) -> list[str]:
    """The serving args without a tensor-parallel flag and its value."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg.removeprefix("--") in TP_ARGS:
            skip = True
            continue
        out.append(arg)
    return out


def leader(spec: LLMModelSpec, srv: Serve, nodes: int) -> tuple[list[str], list[str]]:
    """(command, args) of the group's leader, the pod that answers HTTP."""
    if spec.inference_engine == "sglang":
        return list(srv.command), [*_sglang_args(spec, srv, nodes), "--node-rank", "0"]
    if spec.accelerator_vendor == "cpu":
        return list(srv.command), [*_vllm_mp_args(srv, nodes), "--node-rank", "0"]
    return (["sh", "-c", RAY_LEADER, "ray-leader"],
            [*srv.command, *srv.args, "--pipeline-parallel-size", str(nodes),
             "--distributed-executor-backend", "ray"])


def worker(spec: LLMModelSpec, srv: Serve, nodes: int) -> tuple[list[str], list[str]]:
    """(command, args) of every other pod of the group."""
    if spec.inference_engine == "sglang":
        return list(srv.command), [*_sglang_args(spec, srv, nodes), "--node-rank", WORKER_INDEX]
    if spec.accelerator_vendor == "cpu":
        # The API server's module has no headless mode; the `vllm` command does.
        return ["vllm", "serve"], [*_vllm_mp_args(srv, nodes), "--node-rank", WORKER_INDEX,
                                   "--headless"]
    return ["sh", "-c", RAY_WORKER], []


def _vllm_mp_args(srv: Serve, nodes: int) -> list[str]:
    """VLLM's args for pipeline parallel over its multiprocessing backend across pods."""
    return [*srv.args, "--pipeline-parallel-size", str(nodes),
            "--distributed-executor-backend", "mp", "--nnodes", str(nodes),
            "--master-addr", LEADER_ADDRESS, "--master-port", str(VLLM_MASTER_PORT)]


def _sglang_args(spec: LLMModelSpec, srv: Serve, nodes: int) -> list[str]:
    tensor = spec.resources.accelerator_count * nodes
    return [*_without_tp(srv.args), "--tp-size", str(tensor), "--nnodes", str(nodes),
            "--dist-init-addr", f"{LEADER_ADDRESS}:{SGLANG_DIST_PORT}"]
