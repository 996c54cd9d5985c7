"""Capacity planner: the guide's VRAM table, verdicts, and recommended accelerator counts."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.estimate import GIB, estimate_memory
from llm_operator.profiles.planner import plan

from samples import sample_doc

GB = 1e9 / GIB  # the guide's table is in GB; the planner works in GiB

# The guide's VRAM reference table: (model, total B, active B, Q4 GB, BF16 GB).
GUIDE_TABLE = [
    ("Gemma 4 E2B", 2.3, 2.3, 4, 15),
    ("Gemma 4 E4B", 4.5, 4.5, 8, 15),
    ("Qwen3.5-4B", 4, 4, 3, 9),
    ("Qwen3.5-9B", 9, 9, 6, 18),
    ("Gemma 4 26B-A4B", 25.2, 3.8, 14, 60),
    ("Qwen3.5-27B", 27, 27, 16, 54),
    ("Qwen3.6-27B", 27, 27, 18, 54),
    ("Gemma 4 31B", 30.7, 30.7, 16, 62),
    ("Qwen3.5-35B-A3B", 35, 3, 21, 70),
    ("Qwen3.6-35B-A3B", 35, 3, 22, 70),
    ("Llama 4 Scout", 109, 17, 55, 220),
    ("Mistral Medium 3.5", 128, 128, 70, 256),
    ("DeepSeek-V4-Flash", 284, 13, 80, 570),
    ("Kimi K2.5", 1000, 32, 250, 2000),
    ("Llama 4 Maverick", 400, 17, 224, 860),
    ("GLM-5.1", 754, 40, 180, 1500),
    ("Mistral Large 3", 675, 41, 200, 1350),
    ("DeepSeek-V4-Pro", 1600, 49, 430, None),
]

# Rows whose footprint does NOT follow from the listed total parameters, and why.
NOT_FROM_TOTAL = {
    # Per-layer embeddings are excluded from the "effective" size the table lists.
    ("Gemma 4 E2B", "Q4"), ("Gemma 4 E2B", "BF16"),
    ("Gemma 4 E4B", "Q4"), ("Gemma 4 E4B", "BF16"),
    # The Q4 column quotes ~1.5-2-bit community quants or CPU offload, not 4-bit weights.
    ("DeepSeek-V4-Flash", "Q4"), ("Kimi K2.5", "Q4"), ("GLM-5.1", "Q4"),
    ("Mistral Large 3", "Q4"), ("DeepSeek-V4-Pro", "Q4"),
}


QUANT_OF_COLUMN = {"Q4": "AWQ", "BF16": "BF16"}
COMPARABLE = [
    (column, name, total, active, row[3 if column == "Q4" else 4])
    for column in QUANT_OF_COLUMN
    for row in GUIDE_TABLE
    for name, total, active in [row[:3]]
    if row[3 if column == "Q4" else 4] is not None and (name, column) not in NOT_FROM_TOTAL
]


@pytest.mark.parametrize(("column", "name", "total", "active", "table_gb"), COMPARABLE,
                         ids=[f"{c[1]}-{c[0]}" for c in COMPARABLE])
def test_estimate_within_25_percent_of_guide(column: str, name: str, total: float,
                                            active: float, table_gb: float) -> None:
    est = estimate_memory(total, active, QUANT_OF_COLUMN[column], 4096).total_gib
    assert est == pytest.approx(table_gb * GB, rel=0.25)


def test_excluded_rows_really_differ() -> None:
    """The exclusions are not there to hide a bad model: each is more than 25% off."""
    for name, column in NOT_FROM_TOTAL:
        row = next(r for r in GUIDE_TABLE if r[0] == name)
        table = row[3] if column == "Q4" else row[4]
        est = estimate_memory(row[1], row[2], QUANT_OF_COLUMN[column], 4096)
        assert table is not None
        assert abs(est.total_gib / (table * GB) - 1) > 0.25, (name, column)


@pytest.mark.parametrize(("quant", "bytes_per_param"), [
    ("BF16", 2.0), ("FP8", 1.0), ("INT8", 1.0), ("AWQ", 0.53), ("GGUF-Q4_K_M", 0.61),
    ("GGUF-Q8_0", 1.06),
])
def test_weights_follow_bytes_per_parameter(quant: str, bytes_per_param: float) -> None:
    est = estimate_memory(10, 10, quant, 4096)
    assert est.weights_gib * GIB / 10e9 == pytest.approx(bytes_per_param, abs=0.01)


def test_kv_cache_grows_linearly_with_context() -> None:
    short = estimate_memory(9, 9, "BF16", 8192).kv_cache_gib
    long = estimate_memory(9, 9, "BF16", 65536).kv_cache_gib
    assert long == pytest.approx(8 * short)


def _model(base: dict[str, Any], **spec: Any) -> Any:
    doc = copy.deepcopy(base)
    for key, value in spec.items():
        doc["spec"][key] = value
    return parse_llmmodel(doc)


# (case, spec overrides, verdict, recommended count, words in the reason)
VERDICTS = [
    ("small model on H100", {"resources": {"preferredAcceleratorModel": "NVIDIA H100",
                                           "vramPerAcceleratorGiB": 80}},
     "fits", 1, "usable on 1x NVIDIA H100"),
    ("declared VRAM too low", {"totalParametersBillions": 31, "resources": {
        "preferredAcceleratorModel": "H100", "vramPerAcceleratorGiB": 24}},
     "tight", 1, "raise it to"),
    ("Maverick Q4 on one H100", {"totalParametersBillions": 400, "activeParametersBillions": 17,
                                 "quantization": "AWQ", "resources": {
                                     "preferredAcceleratorModel": "H100"}},
     "does-not-fit", 4, "set resources.acceleratorCount: 4"),
    ("DeepSeek-V4-Pro BF16 on B200s", {"totalParametersBillions": 1600,
                                       "activeParametersBillions": 49, "resources": {
                                           "preferredAcceleratorModel": "B200",
                                           "acceleratorCount": 8}},
     "fits", 8, "3 nodes of 8x NVIDIA B200 192GB (tensor-parallel 8 x pipeline-parallel 3"),
    ("1T Q8 on llama.cpp", {"totalParametersBillions": 1000, "inferenceEngine": "llamacpp",
                                "quantization": "GGUF-Q8_0", "resources": {
                                    "preferredAcceleratorModel": "H100",
                                    "acceleratorCount": 8}},
     "does-not-fit", 8, "(llama.cpp and Ollama serve a model on one node)"),
    ("no size information", {"resources": {}}, "tight", 1, "set one"),
    ("card of another vendor", {"acceleratorVendor": "amd", "resources": {
        "preferredAcceleratorModel": "NVIDIA H100"}}, "does-not-fit", 1, "nvidia accelerator"),
    ("MXFP4 on MI300X", {"acceleratorVendor": "amd", "quantization": "MXFP4",
                         "resources": {"preferredAcceleratorModel": "AMD Instinct MI300X"}},
     "does-not-fit", 1, "MI350X"),
    ("nearly full", {"totalParametersBillions": 30, "quantization": "FP8",
                     "resources": {"vramPerAcceleratorGiB": 48}}, "tight", 1, "headroom"),
    ("tp larger than count", {"engineArgs": {"tensor-parallel-size": "2"},
                              "resources": {"vramPerAcceleratorGiB": 80}},
     "does-not-fit", 1, "tensor-parallel-size 2"),
    ("SGLang's tp larger than count", {"inferenceEngine": "sglang",
                                       "engineArgs": {"tp-size": "4"},
                                       "resources": {"vramPerAcceleratorGiB": 80}},
     "does-not-fit", 1, "engineArgs tp-size 4 needs 4 accelerators"),
    ("SGLang's memory share counts", {"totalParametersBillions": 30, "quantization": "FP8",
                                      "inferenceEngine": "sglang",
                                      "engineArgs": {"mem-fraction-static": "0.5"},
                                      "resources": {"vramPerAcceleratorGiB": 48}},
     "does-not-fit", 2, "at 50% gives 24.0 GiB"),
    ("mlock with too little RAM for the weights", {
        "inferenceEngine": "llamacpp", "quantization": "GGUF-Q8_0", "llamaCpp": {"mlock": True},
        "resources": {"vramPerAcceleratorGiB": 80, "memoryGiB": 8}},
     "does-not-fit", 1, "llamaCpp.mlock pins the ~8.9 GiB of weights in RAM but "
     "resources.memoryGiB is 8: raise it to 11 or turn mlock off"),
    ("mlock with room for the weights", {
        "inferenceEngine": "llamacpp", "quantization": "GGUF-Q8_0", "llamaCpp": {"mlock": True},
        "resources": {"vramPerAcceleratorGiB": 80, "memoryGiB": 48}}, "fits", 1, "usable"),
]


@pytest.mark.parametrize(("case", "spec", "verdict", "count", "words"), VERDICTS,
                         ids=[v[0] for v in VERDICTS])
def test_verdicts(base_local: dict[str, Any], case: str, spec: dict[str, Any], verdict: str,
                  count: int, words: str) -> None:
    result = plan(_model(base_local, **spec))
    assert (result.verdict, result.accelerator_count) == (verdict, count), result.reason
    assert words in result.reason


@pytest.mark.parametrize(("memory", "verdict"), [(32, "fits"), (11, "tight"), (4, "does-not-fit")])
def test_cpu_models_are_sized_against_system_memory(base_local: dict[str, Any], memory: int,
                                                    verdict: str) -> None:
    model = _model(base_local, acceleratorVendor="cpu", inferenceEngine="llamacpp",
                   quantization="GGUF-Q4_K_M", resources={"acceleratorCount": 0,
                                                          "memoryGiB": memory})
    result = plan(model)
    assert result.verdict == verdict
    assert result.tensor_parallel_size == 1 and result.accelerator_count == 0


def test_engine_context_argument_drives_kv_cache(base_local: dict[str, Any]) -> None:
    wide = plan(_model(base_local, contextWindowK=256))
    narrow = plan(_model(base_local, contextWindowK=256, engineArgs={"max-model-len": "8192"}))
    assert narrow.estimate and wide.estimate
    assert narrow.estimate.context_tokens == 8192
    assert narrow.estimate.kv_cache_gib < wide.estimate.kv_cache_gib / 30


def test_remote_models_need_no_memory(base_local: dict[str, Any]) -> None:
    model = _model(base_local, deploymentMode="remote", modelId="gpt-5.5",
                   remoteApi={"baseUrl": "https://api.openai.com/v1", "apiKeySecret": "k"})
    result = plan(model)
    assert (result.verdict, result.estimated_memory_gib) == ("fits", 0.0)
    assert "api.openai.com" in result.reason


def test_plan_json_has_the_documented_fields(base_local: dict[str, Any]) -> None:
    out = plan(_model(base_local)).to_dict()
    assert {"name", "estimatedMemoryGiB", "acceleratorCount", "tensorParallelSize", "verdict",
            "reason"} <= set(out)


@pytest.mark.parametrize(("slots", "tokens"), [(None, 16384), (1, 16384), (4, 65536)])
def test_each_llama_cpp_slot_holds_a_full_context(base_local: dict[str, Any],
                                                   slots: int | None, tokens: int) -> None:
    model = _model(base_local, acceleratorVendor="cpu", inferenceEngine="llamacpp",
                   quantization="GGUF-Q4_K_M", contextWindowK=16,
                   llamaCpp={"parallelSlots": slots} if slots else None,
                   resources={"acceleratorCount": 0, "memoryGiB": 64})
    estimate = plan(model).estimate
    assert estimate is not None and estimate.context_tokens == tokens


def test_once_the_file_is_known_its_header_decides(base_local: dict[str, Any]) -> None:
    """The spec says 9B at Q4 (fits 8 GiB of RAM); the file says it is a 70B: does not fit.

    The cache volume keeps its spec-based size: it is not resized under a running model.
    """
    spec = {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp", "contextWindowK": 4,
            "quantization": "GGUF-Q4_K_M", "resources": {"acceleratorCount": 0, "memoryGiB": 8}}
    before = plan(_model(base_local, **spec))
    assert before.verdict == "fits"
    doc = copy.deepcopy(base_local)
    doc["spec"].update(spec)
    doc["status"] = {"model": {"file": "big.gguf", "sizeBytes": 42_500_000_000, "layers": 80,
                               "embeddingLength": 8192, "headCount": 64, "headCountKV": 8}}
    after = plan(parse_llmmodel(doc))
    assert after.verdict == "does-not-fit"
    assert after.reason.endswith("(sized from big.gguf's header)")
    assert after.cache_size_gib == before.cache_size_gib


# (case, engine, serving.nodes asked, verdict, nodes, tensor, pipeline, words in the reason)
# 405B at BF16 on nodes of 8x H100 80 GB: ~850 GiB, one node gives 576 GiB at 90%.
TOPOLOGIES = [
    ("unset: the fewest nodes that hold it", "vllm", None, "fits", 2, 8, 2,
     "2 nodes of 8x NVIDIA H100 80GB (tensor-parallel 8 x pipeline-parallel 2, a "
     "LeaderWorkerSet)"),
    ("asked for more nodes than needed", "vllm", 3, "fits", 3, 8, 3, "on 3 nodes"),
    ("asked for too few nodes", "vllm", 1, "does-not-fit", 1, 8, 1,
     "more than one node: set serving.nodes: 2"),
    ("asked for 2 and it needs 2", "vllm", 2, "fits", 2, 8, 2, "pipeline-parallel 2"),
    ("SGLang: tensor parallel over every card", "sglang", None, "fits", 2, 16, 1,
     "tensor-parallel 16 over 2 nodes"),
]


@pytest.mark.parametrize(("case", "eng", "asked", "verdict", "nodes", "tensor", "pipeline",
                          "words"), TOPOLOGIES, ids=[t[0] for t in TOPOLOGIES])
def test_a_model_larger_than_a_node_is_planned_across_nodes(
        base_local: dict[str, Any], case: str, eng: str, asked: int | None, verdict: str,
        nodes: int, tensor: int, pipeline: int, words: str) -> None:
    extra: dict[str, Any] = {"serving": {"nodes": asked}} if asked else {}
    result = plan(_model(base_local, totalParametersBillions=405, quantization="BF16",
                         inferenceEngine=eng, resources={"preferredAcceleratorModel": "H100",
                                                         "acceleratorCount": 8}, **extra))
    assert (result.verdict, result.nodes, result.tensor_parallel_size,
            result.pipeline_parallel_size) == (verdict, nodes, tensor, pipeline), result.reason
    assert words in result.reason
    assert result.to_dict()["nodes"] == nodes


# SGLang's recommended hardware for DeepSeek V3/R1 (671B, 37B active; its docs' "DeepSeek
# V3/V3.1/R1 Usage" table), nodes of 8 cards unless it names fewer: (quantization, card,
# vendor, cards per node, SGLang's nodes, the planner's verdict and nodes). The planner
# agrees on the count of every row but two, where it says tight: one MI300X node holds the
# BF16 weights and two L40S nodes the INT8 ones, with under 15% left for the KV cache.
DEEPSEEK_V3 = [
    ("FP8", "H200", "nvidia", 8, 1, "fits", 1),
    ("FP8", "B200", "nvidia", 8, 1, "fits", 1),
    ("FP8", "MI300X", "amd", 8, 1, "fits", 1),
    ("FP8", "H100", "nvidia", 8, 2, "fits", 2),
    ("BF16", "H200", "nvidia", 8, 2, "fits", 2),
    ("BF16", "MI300X", "amd", 8, 2, "tight", 1),
    ("BF16", "H100", "nvidia", 8, 4, "fits", 4),  # 3 hold it; tensor-parallel 24 divides no
    ("BF16", "A100", "nvidia", 8, 4, "fits", 4),  # power-of-two head count
    ("INT8", "A100", "nvidia", 8, 2, "fits", 2),
    ("INT8", "L40S", "nvidia", 8, 4, "tight", 2),
    ("AWQ", "H100", "nvidia", 8, 1, "fits", 1),
    ("AWQ", "A100", "nvidia", 8, 1, "fits", 1),
    ("MXFP4", "MI355X", "amd", 8, 1, "fits", 1),
    ("MXFP4", "MI350X", "amd", 4, 1, "fits", 1),
    ("FP4", "B200", "nvidia", 4, 1, "fits", 1),
]


@pytest.mark.parametrize(("quant", "card", "vendor", "count", "sglang", "verdict", "nodes"),
                         DEEPSEEK_V3, ids=[f"{r[0]}-{r[3]}x{r[1]}" for r in DEEPSEEK_V3])
def test_deepseek_v3_nodes_match_sglangs_hardware_table(
        base_local: dict[str, Any], quant: str, card: str, vendor: str, count: int,
        sglang: int, verdict: str, nodes: int) -> None:
    result = plan(_model(base_local, modelId="deepseek-ai/DeepSeek-V3", inferenceEngine="sglang",
                         modelType="MoE", totalParametersBillions=671,
                         activeParametersBillions=37, quantization=quant,
                         acceleratorVendor=vendor, resources={
                             "preferredAcceleratorModel": card, "acceleratorCount": count}))
    assert (result.verdict, result.nodes) == (verdict, nodes), result.reason
    if nodes > 1:  # tensor parallel over every card of every node
        assert result.tensor_parallel_size == count * nodes
    assert (nodes == sglang) is (verdict == "fits")


# (case, serving.nodes, verdict, words): DeepSeek V3 at BF16 on nodes of 8x H100 with SGLang.
SGLANG_NODES = [
    ("unset: 3 hold it, 4 are planned", None, "fits",
     "tensor-parallel 32 over 4 nodes; 3 would hold it, 4 so that it divides the attention "
     "heads"),
    ("pinned to 3: tensor-parallel 24 is checked by the user", 3, "tight",
     "SGLang's tensor-parallel 24 must divide the model's attention heads, a power of two in "
     "most models: check it, or set serving.nodes: 4"),
    ("pinned to 2: too few, the count that fits is a power of two", 2, "does-not-fit",
     "set serving.nodes: 4"),
    ("pinned to 1: the count suggested is a power of two too", 1, "does-not-fit",
     "more than one node: set serving.nodes: 4,"),
    ("pinned to 4", 4, "fits", "tensor-parallel 32 over 4 nodes, a LeaderWorkerSet"),
]


@pytest.mark.parametrize(("case", "asked", "verdict", "words"), SGLANG_NODES,
                         ids=[c[0] for c in SGLANG_NODES])
def test_sglang_spans_a_power_of_two_of_nodes(base_local: dict[str, Any], case: str,
                                              asked: int | None, verdict: str,
                                              words: str) -> None:
    extra: dict[str, Any] = {"serving": {"nodes": asked}} if asked else {}
    result = plan(_model(base_local, inferenceEngine="sglang", totalParametersBillions=671,
                         activeParametersBillions=37, modelType="MoE", quantization="BF16",
                         resources={"preferredAcceleratorModel": "H100", "acceleratorCount": 8},
                         **extra))
    assert result.verdict == verdict, result.reason
    assert words in result.reason


def test_more_nodes_than_one_replica_may_span_is_refused(base_local: dict[str, Any]) -> None:
    result = plan(_model(base_local, totalParametersBillions=6000, quantization="BF16",
                         resources={"preferredAcceleratorModel": "H100", "acceleratorCount": 8}))
    assert result.verdict == "does-not-fit"
    assert "more than the 16 one replica may span" in result.reason


# (case, prefill cards, decode cards, verdict, words in the reason): Llama 3.1 70B at BF16.
ROLES = [
    ("both roles hold it", 4, 4, "fits", "prefill 4x and decode 4x NVIDIA H100 80GB"),
    ("the prefill role is too small", 1, 4, "does-not-fit",
     "the prefill role's 1x NVIDIA H100 80GB at 90% gives 72.0 GiB: set "
     "serving.disaggregation.prefill.resources.acceleratorCount: 4"),
    ("the decode role is too small", 4, 2, "does-not-fit",
     "serving.disaggregation.decode.resources.acceleratorCount: 4"),
]


@pytest.mark.parametrize(("case", "prefill", "decode", "verdict", "words"), ROLES,
                         ids=[r[0] for r in ROLES])
def test_each_disaggregated_role_must_hold_the_model(
        base_local: dict[str, Any], case: str, prefill: int, decode: int, verdict: str,
        words: str) -> None:
    roles = {"prefill": {"replicas": 1, "resources": {"acceleratorCount": prefill}},
             "decode": {"replicas": 2, "resources": {"acceleratorCount": decode}}}
    result = plan(_model(base_local, totalParametersBillions=70, quantization="BF16",
                         resources={"preferredAcceleratorModel": "H100", "acceleratorCount": 1},
                         serving={"disaggregation": roles}))
    assert result.verdict == verdict, result.reason
    assert words in result.reason


# vLLM on CPU: 16-bit weights (1.86 GiB per billion) + 4 GiB of runtime + the KV space left;
# across serving.nodes pods each holds its share of the weights and of a context's KV cache.
# (case, parameters B, memoryGiB, nodes, context tokens, verdict, KV space GiB, words)
VLLM_CPU = [
    ("270M in 6 GiB", 0.27, 6, 1, 2048, "fits", 1, "1 GiB of KV cache (VLLM_CPU_KVCACHE_SPACE)"),
    ("270M in 12 GiB", 0.27, 12, 1, 2048, "fits", 7, "7 GiB of KV cache"),
    ("270M in 5 GiB", 0.27, 5, 1, 2048, "does-not-fit", 1,
     "needs ~5.5 GiB of RAM but resources.memoryGiB is 5"),
    ("8B in 24 GiB, 128K context", 8, 24, 1, 131072, "tight", 4,
     "a full 131072-token context needs ~15.9 GiB of KV cache but 4 GiB is left"),
    ("270M in 6 GiB, 2 pods", 0.27, 6, 2, 2048, "fits", 1,
     "in each of 2 pods (pipeline-parallel 2, a LeaderWorkerSet): 0.3 GiB of 16-bit weights"),
    ("8B in 16 GiB, 2 pods, 128K context", 8, 16, 2, 131072, "tight", 4,
     "needs ~7.9 GiB of KV cache in each of 2 pods but"),
    ("8B in 12 GiB, 2 pods", 8, 12, 2, 2048, "does-not-fit", 1,
     "needs ~12.6 GiB of RAM in each of 2 pods but resources.memoryGiB is 12"),
]


@pytest.mark.parametrize(
    ("case", "params", "memory", "nodes", "context", "verdict", "space", "words"),
    VLLM_CPU, ids=[c[0] for c in VLLM_CPU])
def test_vllm_on_cpu_gets_the_kv_space_its_ram_leaves(
        base_local: dict[str, Any], case: str, params: float, memory: int, nodes: int,
        context: int, verdict: str, space: int, words: str) -> None:
    doc = copy.deepcopy(base_local)
    doc["spec"].update(acceleratorVendor="cpu", inferenceEngine="vllm", quantization="BF16",
                       totalParametersBillions=params, engineArgs={"max-model-len": str(context)},
                       resources={"acceleratorCount": 0, "memoryGiB": memory},
                       serving={"nodes": nodes})
    result = plan(LLMModel.model_validate(doc))  # the planner's own check, under the CEL rule
    assert (result.verdict, result.field) == (
        verdict, "spec.resources.memoryGiB" if verdict == "does-not-fit" else "spec.resources")
    assert result.estimate is not None and result.estimate.kv_cache_gib == space
    assert (result.nodes, result.pipeline_parallel_size) == (nodes, nodes)
    assert words in result.reason, result.reason


@pytest.mark.parametrize(("card", "profile", "verdict", "reason"), [
    ("NVIDIA H100 80GB HBM3", "3g.40gb", "fits",
     "21.0 of 33.5 GiB usable on MIG 3g.40gb of H100 80GB"),
    ("NVIDIA H100 80GB HBM3", "2g.20gb", "does-not-fit",
     "needs ~21.0 GiB but MIG 2g.20gb of H100 80GB at 90% gives 16.8 GiB: use migProfile "
     "3g.40gb"),
    ("NVIDIA A100-SXM4-40GB", "1g.5gb", "does-not-fit",
     "needs ~21.0 GiB but MIG 1g.5gb of A100 40GB at 90% gives 4.2 GiB: use migProfile "
     "7g.40gb"),  # 3g.20gb and 4g.20gb give 16.8
    ("NVIDIA A30", "4g.24gb", "does-not-fit",
     "needs ~21.0 GiB but MIG 4g.24gb of A30 24GB at 90% gives 20.1 GiB: it needs more than "
     "a whole card: use whole GPUs (remove gpuSharing)"),
])
def test_a_mig_instance_is_planned_by_its_own_memory(card: str, profile: str, verdict: str,
                                                     reason: str) -> None:
    doc = sample_doc("qwen3-8b-mig-nvidia")
    doc["spec"]["resources"].update(preferredAcceleratorModel=card,
                                    gpuSharing={"migProfile": profile})
    found = plan(parse_llmmodel(doc))
    assert (found.verdict, found.reason) == (verdict, reason)
    assert found.accelerator_count == 1
    if verdict == "does-not-fit":
        assert found.field == "spec.resources.gpuSharing.migProfile"
