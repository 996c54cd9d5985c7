"""LoRA adapters: engine flags, where files live, what lora-sync does, what memory they take."""

from __future__ import annotations

from typing import Any

import pytest

from llm_operator.api.v1alpha1 import LLMModelSpec
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles import adapters as A
from llm_operator.profiles.planner import plan

from samples import sample_doc


def _spec(adapters: list[dict[str, Any]], **extra: Any) -> LLMModelSpec:
    return LLMModelSpec.model_validate({
        "modelId": "meta-llama/Llama-3.1-8B-Instruct", "deploymentMode": "local",
        "totalParametersBillions": 8, "loraAdapters": adapters, **extra})


def _hf(name: str, rank: int | None = None, repo: str = "acme/a") -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "source": {"type": "huggingface", "repo": repo}}
    return {**out, "rank": rank} if rank else out


@pytest.mark.parametrize(("ranks", "expected"), [
    ([None], 16), ([4], 8), ([8, 9], 16), ([64], 64), ([100], 128), ([300], 320),
    ([321], 512), ([None, 200], 256),
])
def test_max_lora_rank_rounds_up_to_what_vllm_takes(ranks: list[int | None],
                                                    expected: int) -> None:
    spec = _spec([_hf(f"a{i}", r) for i, r in enumerate(ranks)])
    assert A.max_lora_rank(spec) == expected


@pytest.mark.parametrize(("adapters", "engine_args", "expected"), [
    ([], None, []),
    ([_hf("a", 32)], None, ["--enable-lora", "--max-lora-rank", "32"]),
    ([_hf("a", 32)], {"max-lora-rank": "64"}, ["--enable-lora"]),
])
def test_vllm_flags_size_lora_support_not_the_list(
        adapters: list[dict[str, Any]], engine_args: dict[str, str] | None,
        expected: list[str]) -> None:
    assert A.vllm_args(_spec(adapters, engineArgs=engine_args)) == expected


def test_vllm_flags_do_not_change_when_an_adapter_of_the_same_rank_is_added() -> None:
    one = _spec([_hf("a", 8)])
    two = _spec([_hf("a", 8), _hf("b", 4, repo="acme/b")])
    assert A.vllm_args(one) == A.vllm_args(two)  # no restart


def test_llamacpp_loads_every_adapter_applied_to_none() -> None:
    spec = _spec([_hf("a"), {"name": "b", "source": {"type": "pvc", "claimName": "c",
                                                        "path": "/x/b.gguf"}}],
                 inferenceEngine="llamacpp", acceleratorVendor="cpu",
                 quantization="GGUF-Q4_K_M")
    a_dir = A.download_dir(spec.lora_adapters[0])  # type: ignore[index]
    assert A.llamacpp_paths(spec) == (f"{a_dir}.gguf", "/lora-claims/c/x/b.gguf")
    assert A.llamacpp_selection(spec, "b") == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 1.0}]
    assert A.llamacpp_selection(spec, None) == [{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0.0}]


def test_a_new_source_is_a_new_directory() -> None:
    before = _spec([_hf("a", repo="acme/a")]).lora_adapters[0]  # type: ignore[index]
    after = _spec([_hf("a", repo="acme/a2")]).lora_adapters[0]  # type: ignore[index]
    ranked = _spec([_hf("a", 8, repo="acme/a")]).lora_adapters[0]  # type: ignore[index]
    assert A.download_dir(before) != A.download_dir(after)
    assert A.download_dir(before) == A.download_dir(ranked)  # the rank is not the source


def test_sync_entries_name_what_the_sidecar_downloads() -> None:
    spec = _spec([
        {"name": "a", "source": {"type": "huggingface", "repo": "acme/a",
                                 "huggingFaceTokenSecret": "hf"}},
        {"name": "b", "source": {"type": "s3", "s3Bucket": "bkt"}},
        {"name": "c", "source": {"type": "pvc", "claimName": "claim"}}])
    a, b, _ = spec.lora_adapters  # type: ignore[misc]
    assert A.sync_entries(spec) == [
        {"name": "a", "path": A.download_dir(a), "repo": "acme/a",
         "tokenEnv": A.hf_token_env("hf")},
        {"name": "b", "path": A.download_dir(b)},
        {"name": "c", "path": "/lora-claims/claim"}]


# (case, desired name -> path, loaded name -> path, expected steps)
SYNC_CASES: list[tuple[str, dict[str, str], dict[str, str], list[tuple[str, str]]]] = [
    ("nothing to do", {"a": "/a"}, {"a": "/a"}, []),
    ("first start", {"a": "/a", "b": "/b"}, {}, [("load", "a"), ("load", "b")]),
    ("removed", {}, {"a": "/a"}, [("unload", "a")]),
    ("source changed", {"a": "/a2"}, {"a": "/a"}, [("unload", "a"), ("load", "a")]),
    ("unloads before loads", {"b": "/b"}, {"a": "/a"}, [("unload", "a"), ("load", "b")]),
]


@pytest.mark.parametrize(("case", "desired", "loaded", "expected"), SYNC_CASES,
                         ids=[c[0] for c in SYNC_CASES])
def test_sync_steps(case: str, desired: dict[str, str], loaded: dict[str, str],
                    expected: list[tuple[str, str]]) -> None:
    entries = [{"name": n, "path": p} for n, p in desired.items()]
    steps = A.sync_steps(entries, loaded)
    assert [(s.action, s.name) for s in steps] == expected


def test_loaded_adapters_are_the_cards_with_a_parent() -> None:
    models = {"object": "list", "data": [
        {"id": "base", "root": "/model-cache/source", "parent": None},
        {"id": "sql", "root": "/model-cache/loras/sql-1", "parent": "base"}]}
    assert A.loaded_adapters(models) == {"sql": "/model-cache/loras/sql-1"}
    assert A.loaded_adapters({"error": "x"}) == {}


@pytest.mark.parametrize(("text", "problem"), [
    ("{}", "must be a JSON array"),
    ('[{"name": "a"}]', "entry 0 needs a name and a path"),
    ('[{"name": "", "path": "/a"}]', "entry 0 needs a name and a path"),
    ("[", "Expecting value"),
])
def test_a_broken_list_says_what_is_wrong(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        A.parse_sync_list(text)


def test_adapter_memory_from_the_shape() -> None:
    """Llama-3-8B (4096 wide, 32 layers): a rank-16 slot is 16 x 20 x 4096 x 32 x 2 B."""
    spec = _spec([_hf("a", 16)])
    exact = A.adapter_memory(spec, hidden=4096, layers=32)
    assert exact is not None and exact.slots == 1 and exact.rank == 16
    assert exact.gib == pytest.approx(16 * 20 * 4096 * 32 * 2 / 2**30)
    estimated = A.adapter_memory(spec)
    assert estimated is not None
    assert estimated.gib == pytest.approx(exact.gib, rel=0.25)  # from 8B parameters alone
    slots = A.adapter_memory(_spec([_hf("a", 16)], engineArgs={"max-loras": "4"}),
                             hidden=4096, layers=32)
    assert slots is not None and slots.gib == pytest.approx(4 * exact.gib)
    assert A.adapter_memory(_spec([])) is None


def test_the_planner_counts_adapters() -> None:
    doc = parse_llmmodel(sample_doc("llama32-3b-lora-nvidia"))
    with_adapters = plan(doc)
    without = plan(doc.model_copy(update={"spec": doc.spec.model_copy(
        update={"lora_adapters": None})}))
    assert with_adapters.estimate is not None and without.estimate is not None
    added = with_adapters.estimate.total_gib - without.estimate.total_gib
    assert added == pytest.approx(with_adapters.estimate.adapters_gib) and added > 0.05
    assert "LoRA adapters" in with_adapters.reason
    assert with_adapters.to_dict()["adaptersGiB"] == round(added, 2)
