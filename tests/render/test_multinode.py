"""A replica across nodes: the LeaderWorkerSet that replaces the Deployment, and its parts."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from samples import CLUSTER_EXAMPLES, EDGE_SAMPLES, load_yaml

SAMPLE = next(p for p in EDGE_SAMPLES if p.stem == "llama-405b-multinode-nvidia")
UID = "00000000-0000-4000-8000-000000000001"
LEADERS = {"leaderworkerset.sigs.k8s.io/worker-index": "0"}


def _objects(engine: str = "vllm", settings: Settings | None = None, **serving: Any
             ) -> dict[str, dict[str, Any]]:
    doc = load_yaml(SAMPLE)
    doc["spec"]["inferenceEngine"] = engine
    if serving:
        doc["spec"]["serving"] = serving
    else:
        doc["spec"].pop("serving")
    settings = settings or Settings.model_validate({"inferencePool": {"enabled": True}})
    return {o["kind"]: o for o in render(parse_llmmodel(doc), settings, owner_uid=UID)
            if o["metadata"]["name"] == "llama-405b"}  # not the endpoint picker's


def _group(objects: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(objects["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"])


def _container(template: dict[str, Any]) -> dict[str, Any]:
    return dict(template["spec"]["containers"][0])


def test_no_deployment_and_no_shared_cache_volume() -> None:
    """Each pod downloads into its own claim: one node cannot read another's disk."""
    objects = _objects()
    assert "Deployment" not in objects and "PersistentVolumeClaim" not in objects
    group = _group(objects)
    assert group["size"] == 2 and group["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert [c["metadata"]["name"] for c in group["volumeClaimTemplates"]] == ["model-cache"]
    assert group["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] \
        == "983Gi"
    assert group["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete",
                                                             "whenScaled": "Retain"}
    # each group's own headless Service (named after its leader): the Shared one would be
    # named after the LeaderWorkerSet, which is the model's Service, and give no pod a name
    assert objects["LeaderWorkerSet"]["spec"]["networkConfig"] == {
        "subdomainPolicy": "UniquePerReplica"}
    for pod in (group["leaderTemplate"], group["workerTemplate"]):
        assert all(v["name"] != "model-cache" for v in pod["spec"]["volumes"])
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["model-fetch"]


def test_vllm_leader_serves_over_ray_and_the_worker_joins_it() -> None:
    group = _group(_objects())
    leader, worker = _container(group["leaderTemplate"]), _container(group["workerTemplate"])
    assert leader["command"][:2] == ["sh", "-c"] and "ray start --head" in leader["command"][2]
    assert leader["args"][:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    args = " ".join(leader["args"])
    assert "--tensor-parallel-size 8 --pipeline-parallel-size 2" in args
    assert args.endswith("--distributed-executor-backend ray")
    assert leader["startupProbe"]["httpGet"]["path"] == "/health"
    assert "ray start --block --address=\"$LWS_LEADER_ADDRESS:6379\"" in worker["command"][2]
    assert "args" not in worker and "ports" not in worker
    assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker)
    assert worker["resources"] == leader["resources"]


def test_sglang_runs_one_server_per_node_with_its_rank() -> None:
    group = _group(_objects("sglang"))
    leader, worker = _container(group["leaderTemplate"]), _container(group["workerTemplate"])
    shared = ["--tp-size", "16", "--nnodes", "2", "--dist-init-addr",
              "$(LWS_LEADER_ADDRESS):20000"]
    assert leader["args"][-8:] == [*shared, "--node-rank", "0"]
    assert worker["args"][-8:] == [*shared, "--node-rank", "$(LWS_WORKER_INDEX)"]
    assert leader["args"].count("--tp-size") == 1


def test_traffic_and_scaling_reach_the_leaders() -> None:
    """The Service and the pool select leaders only; KEDA scales the LeaderWorkerSet."""
    objects = _objects()
    assert objects["Service"]["spec"]["selector"] == {
        "ai.example.io/model-name": "llama-405b", **LEADERS}
    assert objects["InferencePool"]["spec"]["selector"]["matchLabels"].items() \
        >= LEADERS.items()
    assert objects["ScaledObject"]["spec"]["scaleTargetRef"] == {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "name": "llama-405b"}
    worker = _group(objects)["workerTemplate"]["metadata"]
    assert worker["labels"]["app.kubernetes.io/component"] == "inference-worker"
    assert "annotations" not in worker  # the leader serves the metrics


def test_workers_keep_the_users_pod_annotations_but_not_the_scrape_ones() -> None:
    doc = load_yaml(SAMPLE)
    doc["spec"]["podAnnotations"] = {"team.example.com/owner": "ml-platform"}
    objects = {o["kind"]: o for o in render(parse_llmmodel(doc), Settings(), owner_uid=UID)}
    group = _group(objects)
    assert group["workerTemplate"]["metadata"]["annotations"] == {
        "team.example.com/owner": "ml-platform"}
    assert group["leaderTemplate"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


@pytest.mark.parametrize(("serving", "kinds"), [
    ({}, {"LeaderWorkerSet"}),  # unset: the planner finds it needs 2 nodes
    ({"nodes": 3}, {"LeaderWorkerSet"}),
])
def test_the_planner_or_serving_nodes_picks_the_group_size(
        serving: dict[str, Any], kinds: set[str]) -> None:
    objects = _objects(**serving)
    assert kinds <= set(objects)
    assert _group(objects)["size"] == serving.get("nodes", 2)


def test_a_model_that_fits_one_node_keeps_its_deployment() -> None:
    doc = load_yaml(SAMPLE)
    doc["spec"]["totalParametersBillions"] = 70
    doc["spec"].pop("serving")
    kinds = {o["kind"] for o in render(parse_llmmodel(doc), Settings(), owner_uid=UID)}
    assert "Deployment" in kinds and "LeaderWorkerSet" not in kinds


CPU_SAMPLE = next(p for p in CLUSTER_EXAMPLES if p.stem == "gemma-270m-vllm-2-nodes")


def test_vllm_on_cpu_runs_its_own_multiprocessing_backend_across_the_group() -> None:
    """No Ray (vLLM's Ray executor places GPU workers only): every pod runs vLLM with its
    node rank; the leader serves HTTP and the rendezvous, the workers run headless."""
    model = parse_llmmodel(load_yaml(CPU_SAMPLE))
    lws = next(o for o in render(model, Settings()) if o["kind"] == "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    leader, worker = (_container(group[t]) for t in ("leaderTemplate", "workerTemplate"))
    shared = ["--pipeline-parallel-size", "2", "--distributed-executor-backend", "mp",
              "--nnodes", "2", "--master-addr", "$(LWS_LEADER_ADDRESS)", "--master-port",
              "29501"]
    assert leader["command"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert leader["args"][-len(shared) - 2:] == [*shared, "--node-rank", "0"]
    assert worker["command"] == ["vllm", "serve"]
    assert worker["args"][-len(shared) - 3:] == [*shared, "--node-rank", "$(LWS_WORKER_INDEX)",
                                                 "--headless"]
    assert worker["args"][:-len(shared) - 3] == leader["args"][:-len(shared) - 2]
    assert "--max-model-len" in leader["args"]  # the CPU serving args, not a GPU's
    for pod in (leader, worker):  # each pod's own KV space, beside its half of the weights
        env = {e["name"]: e["value"] for e in pod["env"]}
        assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["OMP_NUM_THREADS"] == "1"
    assert "ports" not in worker and "startupProbe" not in worker
