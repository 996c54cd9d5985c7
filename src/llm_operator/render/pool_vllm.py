"""A vLLM model pool in a cluster: members that take turns on one accelerator (sleep mode).

One pod per replica. Its ``pool-server`` container (the vLLM image) starts the members'
servers one after another on loopback, each with ``--enable-sleep-mode`` and its share of
the accelerator's memory, and puts each to sleep once it serves, but for the last
``maxLoaded``: at most ``maxLoaded`` are ever awake. Beside it, ``pool-gateway`` (the
operator's image) runs `llmop gateway` with a route per member in one sleep group
(gateway/routing/sleepers.py): it serves the pool's port, and wakes the member a request names,
after putting the least recently used idle one to sleep. The Service, the router and the
members' status see the same pool as a llama.cpp one (render/pool_engine.py).
"""

from __future__ import annotations

import math
import posixpath
import shlex
from collections.abc import Sequence
from typing import Any

from llm_operator.api.kv_cache import mib_quantity
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.profiles.engines import CACHE_DIR, PORT, vllm_sleeper
from llm_operator.profiles.kv_tier import pool_tier_mib
from llm_operator.profiles.pool import PoolPlan
from llm_operator.profiles.settings import Settings
from llm_operator.profiles.vendors import vendor
from llm_operator.render import accelerators, engine_image, pod_node_selector, pod_tolerations
from llm_operator.render.accelerators import cpu_quantity
from llm_operator.render.compile_cache import compile_cache
from llm_operator.render.meta import restricted_container_security
from llm_operator.render.pool_pod import (
    CONFIG_DIR,
    SERVER_CONTAINER,
    gateway_container,
    member_dir,
)
from llm_operator.render.pool_pod import gateway_config as pool_gateway_config
from llm_operator.render.weights import node_file

LAUNCHER_FILE = "launch.sh"
FIRST_MEMBER_PORT = PORT + 1  # members listen on loopback from here, in name order
READY_FILE = "/tmp/llmop-pool-ready"  # the launcher's: every member serves
SLEEP_GROUP = "accelerator"
USABLE = 0.90  # of the accelerator's memory, for the awake members together
PER_SLEEPER = 0.01  # what a sleeping member keeps there (its CUDA context)


def gpu_fraction(members: int, awake: int) -> float:
    """Each member's ``--gpu-memory-utilization``: ``awake`` of them fit beside the rest asleep.

    Rounded down to a hundredth: vLLM refuses to start when the fraction asks for more
    than is free.
    """
    usable = USABLE - PER_SLEEPER * max(0, members - awake)
    return math.floor(usable / awake * 100) / 100


def launcher(members: Sequence[LLMModel], awake: int, *, first_port: int = FIRST_MEMBER_PORT,
             ready_file: str = READY_FILE) -> str:
    """The pool-server container's script: each member started in turn.

    All but the last ``awake`` (pinned members start last) are put to sleep once they
    serve, so that no more than ``awake`` ever hold the accelerator's memory; then
    ``ready_file`` is made (the container's probes). The container ends when any member
    does (the kubelet starts it again). ``first_port``: the first member's, on loopback
    (the next ones follow).
    """
    fraction = gpu_fraction(len(members), awake)
    lines = [
        "#!/bin/bash",
        "# llm-operator: a vLLM model pool's members, started in turn (docs/model-pools.md)",
        "set -euo pipefail",
        "# stopped (the pod deleted: bash as PID 1 ignores what it does not trap) or ended,",
        "# it stops the members that still run and waits for them",
        "trap 'exit 0' TERM INT",
        "trap 'kill $(jobs -p) 2>/dev/null || true; wait' EXIT",
        "serving() {  # until the member on port $1 (process $2) answers /health",
        "  until python3 -c 'import sys, urllib.request; urllib.request.urlopen("
        "\"http://127.0.0.1:%s/health\" % sys.argv[1], timeout=5)' \"$1\" 2>/dev/null; do",
        "    kill -0 \"$2\" 2>/dev/null || { echo \"member on port $1 exited while starting\""
        " >&2; exit 1; }",
        "    sleep 1",
        "  done",
        "}",
        "to_sleep() {  # POST /sleep?level=1: weights to host memory, KV cache dropped",
        "  python3 -c 'import sys, urllib.request; urllib.request.urlopen(urllib.request."
        "Request(\"http://127.0.0.1:%s/sleep?level=1\" % sys.argv[1], method=\"POST\"), "
        "timeout=600)' \"$1\"",
        "}",
    ]
    # pinned members start last, so that they are among those left awake (ports stay in
    # name order: the gateway's routes name them so)
    pinned = [bool(m.spec.pool and m.spec.pool.pinned) for m in members]
    order = sorted(range(len(members)), key=lambda i: pinned[i])
    for turn, i in enumerate(order):
        member, port = members[i], first_port + i
        served = vllm_sleeper(member.spec, member_dir(member), port, fraction)
        env = tuple(f"{k}={v}" for k, v in served.env)
        command = " ".join(shlex.quote(a) for a in ("env", *env, *served.command,
                                                    *served.args))
        lines += [f"echo 'starting {member.spec.model_id} on port {port}'",
                  f"{command} &", f"serving {port} $!"]
        if turn < len(members) - awake:
            lines.append(f"to_sleep {port}")
    lines += [f"touch {shlex.quote(ready_file)}",
              f"echo 'the pool serves: {len(members)} members started, {awake} awake'",
              "wait -n || true  # any member's end, whatever its status",
              "echo 'a member of the pool exited' >&2", "exit 1", ""]
    return "\n".join(lines)


def gateway_config(members: Sequence[LLMModel], awake: int, *,
                   first_port: int = FIRST_MEMBER_PORT, port: int = PORT) -> str:
    """The pool-gateway's config: a route per member's server, one sleep group."""
    return pool_gateway_config(
        members, [f"http://127.0.0.1:{first_port + i}/v1" for i in range(len(members))],
        group=SLEEP_GROUP, max_awake=awake, port=port)


def pod(members: Sequence[LLMModel], plan: PoolPlan, settings: Settings, config_map: str
        ) -> dict[str, Any]:
    """The pool's pod (its Deployment wraps it): the members' server and the gateway.

    Placed as a member's own pod would be: the vendor's node selector and tolerations, and
    the preferred accelerator's affinity.
    """
    first = members[0]
    vp = vendor(first.spec.accelerator_vendor)
    image = engine_image(vp, "vllm", settings)
    assert image is not None and vp.resource_key is not None  # rule pool-vllm-sleep-mode
    count = max(m.spec.resources.accelerator_count for m in members)
    # host memory: each member's process as its own pod asks, the weights asleep, and each
    # member's host KV tier
    gib = math.ceil(sum(m.spec.resources.memory_gi_b for m in members) + plan.asleep_gib)
    memory = mib_quantity(gib * 1024 + pool_tier_mib([m.spec for m in members]))
    volumes: list[dict[str, Any]] = [
        {"name": "pool-config", "configMap": {"name": config_map, "defaultMode": 0o555}},
        {"name": "shm", "emptyDir": {"medium": "Memory"}},
        {"name": "model-cache", "emptyDir": {}}]  # the members' vLLM caches (compile)
    mounts: list[dict[str, Any]] = [_config_mount(), {"name": "shm", "mountPath": "/dev/shm"},
                                    {"name": "model-cache", "mountPath": CACHE_DIR}]
    compiled = compile_cache(first.namespace, "vllm", settings)
    if compiled:
        volumes.append(compiled[0])
        mounts.append(compiled[1])
    for i, member in enumerate(members):
        volumes.append({"name": f"member-{i}", "hostPath": {"path": node_file(member.spec),
                                                            "type": "Directory"}})
        mounts.append({"name": f"member-{i}", "mountPath": member_dir(member),
                       "readOnly": True})
    server = {
        "name": SERVER_CONTAINER, "image": image,
        "imagePullPolicy": settings.images.pull_policy,
        "command": ["/bin/bash", posixpath.join(CONFIG_DIR, LAUNCHER_FILE)],
        "env": [{"name": "HOME", "value": "/tmp"}, *({"name": k, "value": v}
                                                     for k, v in vp.env)],
        "resources": {"requests": {"cpu": cpu_quantity(plan.cpu_millicores), "memory": memory,
                                   vp.resource_key: str(count)},
                      "limits": {"memory": memory, vp.resource_key: str(count)}},
        "volumeMounts": mounts,
        "startupProbe": {**_ready(), "periodSeconds": 5, "failureThreshold":
                         max(1, settings.startup_timeout_seconds // 5)},
        "readinessProbe": {**_ready(), "periodSeconds": 10},
        "securityContext": restricted_container_security(non_root=False,
                                                         add=vp.capabilities_add),
    }
    gateway = gateway_container(settings, _config_mount())
    out: dict[str, Any] = {
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [server, gateway], "volumes": volumes}
    selector = pod_node_selector(first.spec, settings)
    if selector:
        out["nodeSelector"] = dict(sorted(selector.items()))
    tolerations = pod_tolerations(first.spec, settings)
    if tolerations:
        out["tolerations"] = tolerations
    affinity = accelerators.affinity(first.spec, vp, settings)
    if affinity:
        out["affinity"] = affinity
    return out


def _config_mount() -> dict[str, Any]:
    return {"name": "pool-config", "mountPath": CONFIG_DIR, "readOnly": True}


def _ready() -> dict[str, Any]:
    """The launcher's word that every member serves (its ready file)."""
    return {"exec": {"command": ["test", "-f", READY_FILE]}}
