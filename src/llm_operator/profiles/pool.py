"""A pool's size (the maxLoaded largest members at once) and how its members take turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_operator.api.pool import PoolSpec
from llm_operator.api.pools import pool_problems, pool_scaling, pools
from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import Problem
from llm_operator.profiles.planner import plan

# llama-server in router mode: the process that routes and spawns the members' servers
ROUTER_GIB = 0.1


@dataclass(frozen=True)
class Beside:
    """A container beside a pool's engine in its pod: what it asks for."""

    name: str
    cpu_millicores: int
    memory_mib: int  # requested
    limit_mib: int


# `llmop gateway`, where members take turns under a policy (vLLM pools always)
POOL_GATEWAY = Beside("pool-gateway", 100, 256, 512)
# `llmop pool-reload`: a llama.cpp pool's router reads its edited preset (a Python process
# that imports click and the stdlib: about 30 MiB resident)
POOL_RELOAD = Beside("pool-reload", 10, 64, 64)


def takes_turns(members: Sequence[LLMModel]) -> bool:
    """Whether a llama.cpp pool sets a policy against thrash or pins a member.

    Then its members take turns under a gateway in the pod, as under `llmop up`: a
    minimum residency, a swap budget, pinned members never unloaded for another. Else
    llama-server's router unloads the least recently used member.
    """
    return any(m.spec.pool is not None and (against_thrash(m.spec.pool) or m.spec.pool.pinned)
               for m in members)


def beside_engine(members: Sequence[LLMModel]) -> tuple[Beside, ...]:
    """The containers a pool's pod runs beside its engine, in the pod's order."""
    if members[0].spec.inference_engine == "vllm":
        return (POOL_GATEWAY,)
    return (POOL_RELOAD, *((POOL_GATEWAY,) if takes_turns(members) else ()))


@dataclass(frozen=True)
class PoolPlan:
    """How much a pool needs: each member's estimate, the largest maxLoaded of them summed.

    CPU likewise: the maxLoaded members asking the most, each serving (and loading) at the
    CPU its own pod would have, not one member's CPU shared by all those loaded.
    """

    name: str
    max_loaded: int
    members: tuple[tuple[str, float], ...]  # (name, estimated GiB), largest first
    limit_gib: float | None  # spec.pool.memoryGiB
    cpu_millicores: int  # the maxLoaded largest members' resources.cpuMillicores summed
    # the weights of the members that may be asleep at once (all but maxLoaded, the
    # largest): where engines sleep (vLLM's level 1), host memory holds them
    asleep_gib: float
    replicas: tuple[int, int] = (1, 1)  # its bounds from its members' scaling (min, max)
    beside: tuple[Beside, ...] = ()  # the pod's containers beside the engine

    @property
    def beside_cpu_millicores(self) -> int:
        return sum(b.cpu_millicores for b in self.beside)

    @property
    def beside_memory_mib(self) -> int:
        return sum(b.memory_mib for b in self.beside)

    @property
    def loaded(self) -> tuple[tuple[str, float], ...]:
        """The members that need the most memory when loaded together."""
        return self.members[:self.max_loaded]

    @property
    def need_gib(self) -> float:
        return ROUTER_GIB + sum(gib for _, gib in self.loaded)


def plan_pool(members: Sequence[LLMModel]) -> PoolPlan:
    """The pool's plan from its members (as pools() gives them; the first one's settings)."""
    pool = members[0].spec.pool
    assert pool is not None
    sizes, weights = [], []
    for member in members:
        estimate = plan(member).estimate
        sizes.append((member.name, estimate.total_gib if estimate else 0.0))
        weights.append(estimate.weights_gib if estimate else 0.0)
    sizes.sort(key=lambda s: (-s[1], s[0]))
    cpus = sorted((m.spec.resources.cpu_millicores for m in members), reverse=True)
    asleep = sorted(weights, reverse=True)[:max(0, len(members) - pool.max_loaded)]
    scaling = pool_scaling(members)
    return PoolPlan(pool.name, pool.max_loaded, tuple(sizes),
                    float(pool.memory_gi_b) if pool.memory_gi_b else None,
                    sum(cpus[:pool.max_loaded]), sum(asleep),
                    (scaling.min_replicas, scaling.max_replicas), beside_engine(members))


def pool_fit_problems(pool: PoolPlan) -> dict[str, list[Problem]]:
    """By member name: one larger than memoryGiB, or maxLoaded members that do not fit."""
    out: dict[str, list[Problem]] = {}
    if pool.limit_gib is None:
        return out
    for name, gib in pool.members:
        if gib > pool.limit_gib:
            out.setdefault(name, []).append(Problem(
                "spec.pool.memoryGiB", f"this member needs ~{gib:.1f} GiB and pool "
                f"{pool.name} has {pool.limit_gib:.0f}: raise memoryGiB, or serve the model "
                "outside the pool"))
    if not out and pool.need_gib > pool.limit_gib:
        largest = ", ".join(n for n, _ in pool.loaded)
        for name, _ in pool.loaded:
            out.setdefault(name, []).append(Problem(
                "spec.pool.maxLoaded", f"the {pool.max_loaded} largest members of pool "
                f"{pool.name} ({largest}) need ~{pool.need_gib:.1f} GiB loaded together and "
                f"memoryGiB is {pool.limit_gib:.0f}: lower maxLoaded or raise memoryGiB"))
    return out


def across_pools(models: Sequence[LLMModel], where: str
                 ) -> dict[tuple[str, str], list[Problem]]:
    """Every pooled model's problems by (namespace, name).

    Members that disagree (api.pools), else members that do not fit the pool's memoryGiB.
    """
    out = pool_problems(models, where)
    for (namespace, _), members in pools(models).items():
        if any((namespace, m.name) in out for m in members):
            continue  # sized once its members agree
        for name, problems in pool_fit_problems(plan_pool(members)).items():
            out.setdefault((namespace, name), []).extend(problems)
    return out


def against_thrash(pool: PoolSpec) -> dict[str, int]:
    """The gateway's sleep-group policy for a pool (its config's camelCase names)."""
    policy = {"minAwakeSeconds": pool.min_residency_seconds,
              "maxWakesPerMinute": pool.max_swaps_per_minute}
    return {k: v for k, v in policy.items() if v is not None}


def sleep_settings(pool: PoolSpec, group: str, max_awake: int, control: str | None = None
                   ) -> dict[str, Any]:
    """A member's ``sleep`` in a gateway's route: its group, places, policy and pin.

    The policy against thrash is the pool's; ``control`` is how the engine is told (None:
    the gateway's default, vLLM's sleep mode).
    """
    return {"group": group, "maxAwake": max_awake,
            **({"control": control} if control else {}), **against_thrash(pool),
            **({"pinned": True} if pool.pinned else {})}
