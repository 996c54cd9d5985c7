"""The host KV tier: its size, the engine's flags, the pod's memory and status, per engine."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.kv_cache import mib_quantity, quantity_bytes
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.engines import engine_arg_problems
from llm_operator.profiles.kv_tier import host_tier_mib, pool_tier_mib, status_quantity
from llm_operator.profiles.planner import plan
from llm_operator.profiles.settings import Settings
from llm_operator.render import render

from samples import sample_doc

LLAMA_CPU = {"acceleratorVendor": "cpu", "inferenceEngine": "llamacpp",
             "quantization": "GGUF-Q4_K_M", "resources": {"acceleratorCount": 0,
                                                            "memoryGiB": 48}}


def _model(stem: str, tier: int | str | None, **spec: Any) -> Any:
    doc = copy.deepcopy(sample_doc(stem))
    doc["spec"].update(spec)
    if tier is not None:
        doc["spec"]["kvCache"] = {"hostMemory": tier}
    return parse_llmmodel(doc)


def _engine(model: Any) -> dict[str, Any]:
    """The inference pod's engine container, as rendered for the cluster."""
    objects = render(model, Settings(), owner_uid="uid")
    pod = next(o for o in objects if o["kind"] == "Deployment")["spec"]["template"]["spec"]
    found: dict[str, Any] = next(c for c in pod["containers"]
                                 if c["name"] == "inference-server")
    return found


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


# (case, sample, tier declared, spec patch, the engine's flags, pod memory, status)
CASES: list[tuple[str, str, int | str | None, dict[str, Any], dict[str, str | None], str,
                  str | None]] = [
    ("llama.cpp, the default", "gemma4-31b-nvidia", None, LLAMA_CPU,
     {"--cache-ram": "256"}, "49408Mi", "256Mi"),
    ("llama.cpp, 2Gi declared", "gemma4-31b-nvidia", "2Gi", LLAMA_CPU,
     {"--cache-ram": "2048"}, "50Gi", "2Gi"),
    ("llama.cpp, off", "gemma4-31b-nvidia", 0, LLAMA_CPU, {"--cache-ram": "0"}, "48Gi", "0"),
    ("vLLM on nvidia, off by default", "gemma4-31b-nvidia", None, {},
     {"--kv-offloading-size": None, "--kv-offloading-backend": None}, "32Gi", "0"),
    ("vLLM on nvidia, 64Gi offloaded", "gemma4-31b-nvidia", "64Gi", {},
     {"--kv-offloading-size": "64", "--kv-offloading-backend": "native"}, "96Gi", "64Gi"),
    ("vLLM on amd, 1536Mi offloaded", "gemma4-26b-amd", "1536Mi", {},
     {"--kv-offloading-size": "1.5", "--kv-offloading-backend": "native"}, "67072Mi",
     "1536Mi"),
    ("vLLM on gaudi: no tier", "qwen36-35b-gaudi", None, {},
     {"--kv-offloading-size": None}, "64Gi", None),
    ("Ollama: no tier in a pod", "qwen35-9b-cpu", None, {}, {"--cache-ram": None}, "32Gi",
     None),
]


@pytest.mark.parametrize(("case", "sample", "tier", "patch", "flags", "memory", "status"),
                         CASES, ids=[c[0] for c in CASES])
def test_the_tier_is_set_counted_and_reported(case: str, sample: str, tier: int | str | None,
                                              patch: dict[str, Any],
                                              flags: dict[str, str | None], memory: str,
                                              status: str | None) -> None:
    model = _model(sample, tier, **patch)
    container = _engine(model)
    args = [*container.get("command", []), *container.get("args", [])]
    assert {name: _flag(args, name) for name in flags} == flags
    # on top of resources.memoryGiB, as the API server stores it (canonical)
    assert container["resources"]["requests"]["memory"] == memory
    assert container["resources"]["limits"]["memory"] == memory
    assert status_quantity(model.spec) == status
    assert plan(model).host_tier_mib == host_tier_mib(model.spec)


@pytest.mark.parametrize(("text", "expected"), [
    ("0", 0), ("512Mi", 512 * 2**20), ("2Gi", 2 * 2**30), ("1Ti", 2**40), ("64Ki", 65536),
    ("2G", 2 * 10**9), ("500M", 500 * 10**6), (0, 0),
])
def test_a_size_reads_as_kubernetes_reads_it(text: int | str, expected: int) -> None:
    assert quantity_bytes(text) == expected


@pytest.mark.parametrize("text", ["1.5Gi", "1e9", "-1Gi", "512", "0Gi", "2gi", " 1Gi", ""])
def test_a_size_without_its_unit_or_with_a_fraction_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="512Mi or 2Gi"):
        quantity_bytes(text)


@pytest.mark.parametrize(("mib", "written"), [
    (0, "0"), (256, "256Mi"), (1024, "1Gi"), (1280, "1280Mi"), (1024 * 1024, "1Ti"),
    (3 * 1024 * 1024 + 1024, "3073Gi"),
])
def test_memory_is_written_as_the_api_server_stores_it(mib: int, written: str) -> None:
    assert mib_quantity(mib) == written


def test_a_pool_counts_the_tiers_its_loaded_members_may_hold() -> None:
    specs = [_model("gemma4-31b-nvidia", tier, **LLAMA_CPU).spec
             for tier in ("1Gi", None, "512Mi")]
    assert pool_tier_mib(specs, 2) == 1024 + 512  # the two largest, loaded at once
    assert pool_tier_mib(specs) == 1024 + 256 + 512


@pytest.mark.parametrize(("patch", "args"), [
    (LLAMA_CPU, {"cache-ram": "8192"}),
    ({}, {"kv-offloading-size": "400"}),
    ({}, {"kv_offloading_size": "400"}),  # vLLM takes underscores too
], ids=["llama.cpp", "vLLM", "vLLM, underscores"])
def test_engine_args_that_set_the_tier_are_refused_for_the_declared_field(
        patch: dict[str, Any], args: dict[str, str]) -> None:
    model = _model("gemma4-31b-nvidia", None, **patch, engineArgs=args)
    assert any("set kvCache.hostMemory instead" in p for p in engine_arg_problems(model.spec))
