"""Registry queries with the guide's find_models semantics, over the guide's samples."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from click.testing import CliRunner

from llm_operator.api.v1alpha1 import LLMModel
from llm_operator.api.validation import parse_llmmodel
from llm_operator.cli.main import cli
from llm_operator.registry.query import ANY_PHASE, Query, select, summary

from samples import EDGE_SAMPLES, GUIDE_SAMPLES, SAMPLES, load_yaml


def models(phase: str | None = None) -> list[LLMModel]:
    out = []
    for path in GUIDE_SAMPLES + EDGE_SAMPLES:
        doc: dict[str, Any] = copy.deepcopy(load_yaml(path))
        if phase:
            doc["status"] = {"phase": "Proxying" if doc["spec"]["deploymentMode"] == "remote"
                             else phase}
        out.append(parse_llmmodel(doc))
    return out


def names(query: Query, phase: str | None = "Ready") -> list[str]:
    return [m.name for m in select(models(phase), query)]


# The guide's chapter 10 examples and a few more; every local sample is Ready here.
QUERIES: list[tuple[str, Query, list[str]]] = [
    ("vision with at least 128K context",
     Query(domains=("vision",), min_context_k=128),
     ["claude-opus47-remote", "gemini31-remote", "gemma4-26b-amd", "gemma4-31b-nvidia",
      "gemma4-e4b-ollama", "gpt55-remote", "llama4-maverick"]),
    ("all AMD models", Query(vendor="amd"), ["gemma4-26b-amd", "gemma4-e4b-ollama"]),
    ("reasoning within 24 GiB (find_models example)",
     Query(domains=("reasoning",), max_vram_gib=24, min_context_k=128),
     ["gemma4-26b-amd", "gemma4-31b-nvidia", "qwen35-9b-cpu", "qwen36-35b-gaudi"]),
    ("remote API models", Query(mode="remote"),
     ["claude-opus47-remote", "gemini31-remote", "gpt55-remote", "internal-llm"]),
    ("thinking models", Query(thinking=True),
     ["claude-opus47-remote", "qwen3-32b-sglang", "qwen35-4b-llamacpp", "qwen35-9b-cpu",
      "qwen36-35b-gaudi"]),
    ("CPU only", Query(max_vram_gib=0),
     ["llama32-3b-shaped", "qwen25-1b-lora", "qwen35-4b-llamacpp", "qwen35-9b-cpu"]),
    ("two domains at once", Query(domains=("code", "math")),
     ["gpt55-remote", "qwen36-35b-gaudi"]),
]


@pytest.mark.parametrize(("case", "query", "expected"), QUERIES, ids=[q[0] for q in QUERIES])
def test_queries(case: str, query: Query, expected: list[str]) -> None:
    found = sorted(names(query))
    assert found == sorted(expected)


@pytest.mark.parametrize(("query", "selector"), [
    (Query(domains=("vision",)), "ai.example.io/domain-vision=true"),
    (Query(vendor="amd", mode="local"),
     "ai.example.io/accelerator-vendor=amd,ai.example.io/deployment-mode=local"),
    (Query(domains=("reasoning",), max_vram_gib=24),
     "ai.example.io/domain-reasoning=true,ai.example.io/vram-tier in (cpu,8gb,16gb,24gb)"),
    (Query(min_context_k=128), ""),
])
def test_label_selector_is_the_guides(query: Query, selector: str) -> None:
    assert query.label_selector() == selector


def test_by_default_only_serving_models_are_returned() -> None:
    everything = models(phase=None)
    assert select(everything, Query()) == []  # no status yet: nothing serves
    assert len(select(everything, Query(phases=(ANY_PHASE,)))) == len(everything)
    serving = models(phase="Ready")
    assert len(select(serving, Query())) == len(serving)
    downloading = models(phase="Downloading")
    assert {m.name for m in select(downloading, Query())} == {
        "claude-opus47-remote", "gemini31-remote", "gpt55-remote", "internal-llm"}


def test_summary_is_what_an_agent_needs() -> None:
    model = next(m for m in models("Ready") if m.name == "qwen36-35b-gaudi")
    assert summary(model) | {"endpoint": None} == {
        "name": "qwen36-35b-gaudi", "namespace": "ai-models", "toolName": "qwen36_reasoning_gaudi",
        "modelId": "Qwen/Qwen3.6-35B-A3B",
        "domains": ["general", "reasoning", "math", "code", "multilingual", "agentic"],
        "contextWindowK": 256, "servedContextTokens": 65536,  # engineArgs max-model-len
        "supportsThinking": True, "vendor": "intel-gaudi",
        "mode": "local", "vramPerAcceleratorGiB": 24, "status": "Ready", "endpoint": None}


def test_models_command() -> None:
    result = CliRunner().invoke(cli, ["models", "-f", str(SAMPLES), "--domain", "reasoning",
                                      "--max-vram", "24", "--min-context", "128", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert [r["name"] for r in json.loads(result.stdout)] == [
        "gemma4-26b-amd", "gemma4-31b-nvidia", "qwen35-9b-cpu", "qwen36-35b-gaudi"]
    table = CliRunner().invoke(cli, ["models", "-f", str(SAMPLES), "--vendor", "amd"])
    assert "gemma4-26b-amd" in table.stdout and "google/gemma-4-26b-a4b-it" in table.stdout
    none = CliRunner().invoke(cli, ["models", "-f", str(SAMPLES), "--phase", "Ready"])
    assert "No matching models found." in none.stdout
