"""LLMModel spec.serving: how one replica spreads over pods (nodes, prefill and decode roles)."""

from __future__ import annotations

from pydantic import Field

from llm_operator.api.wire import Wire

MAX_NODES = 16  # pods (one per node) that serve one replica together
MULTI_NODE_ENGINES = ("vllm", "sglang")  # serve one replica across nodes
DISAGGREGATED_ENGINE = "vllm"  # hands the KV cache from prefill to decode (NIXL)
GPU_VENDORS = ("nvidia", "amd")  # where both shapes run
# vLLM on CPU serves across nodes too: pipeline parallel over its multiprocessing backend
# (its Ray executor places GPU workers only).
CPU_MULTI_NODE_ENGINE = "vllm"
ROLES = ("prefill", "decode")


class RoleResourcesSpec(Wire):
    """What one pod of a role gets; each unset field is taken from spec.resources."""

    accelerator_count: int | None = Field(
        None, ge=1, le=16, description="Accelerators per pod of this role (its tensor-parallel "
        "size); unset: resources.acceleratorCount.")
    cpu_millicores: int | None = Field(
        None, ge=100, le=1_024_000, description="CPU request in millicores; unset: "
        "resources.cpuMillicores.")
    memory_gi_b: int | None = Field(
        None, alias="memoryGiB", ge=1, le=16384, description="System RAM in GiB; unset: "
        "resources.memoryGiB.")


class ServingRoleSpec(Wire):
    """One role of a disaggregated model: its own replica count and pod resources."""

    replicas: int = Field(
        1, ge=0, le=1000, description="Pods of this role (at least 1; the operator's "
        "autoscalers leave a disaggregated model's roles at these counts).")
    resources: RoleResourcesSpec | None = Field(
        None, description="This role's pod resources; unset fields: spec.resources.")


class DisaggregationSpec(Wire):
    """Prefill and decode on separate pods, the KV cache sent between them (vLLM, NIXL)."""

    prefill: ServingRoleSpec = Field(
        description="Pods that read the prompt and hand its KV cache to a decode pod.")
    decode: ServingRoleSpec = Field(
        description="Pods that generate the answer from the handed-over KV cache; the "
        "model's Service sends plain requests here.")

    def role(self, name: str) -> ServingRoleSpec:
        """The role called ``name`` (prefill or decode)."""
        found: ServingRoleSpec = getattr(self, name)
        return found


class ServingSpec(Wire):
    """How one replica of a local model is laid out over pods."""

    nodes: int | None = Field(
        None, ge=1, le=MAX_NODES,
        description="Pods, one per node, that serve one replica together (vllm, sglang): "
        "more than 1 renders a LeaderWorkerSet, tensor parallel over each node's "
        "resources.acceleratorCount and pipeline parallel across the nodes (vLLM on CPU: "
        "pipeline parallel, each pod holding its share of the layers). Unset: the planner "
        "picks 1, or the fewest nodes that hold a model no single node can (GPUs only).")
    disaggregation: DisaggregationSpec | None = Field(
        None, description="Serve prefill and decode on separate pods (vllm): two roles with "
        "their own replicas and resources, rendered as Deployments or, with the "
        "DisaggregatedSet CRD installed, as one DisaggregatedSet (operator setting "
        "disaggregation.workload).")
