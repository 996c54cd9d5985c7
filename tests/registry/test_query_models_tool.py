"""tools/query_models.py, run as the guide runs it, against kmock's Kubernetes emulator."""

from __future__ import annotations

import asyncio
import copy
import os
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from click.testing import CliRunner

from llm_operator.cli.main import cli

from samples import GUIDE_SAMPLES, REPO, load_yaml

TOOL = REPO / "tools" / "query_models.py"
LLMMODELS = kmock.resource("ai.example.io", "v1alpha1", "llmmodels")


def serving(doc: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    remote = out["spec"]["deploymentMode"] == "remote"
    out["status"] = {"phase": "Proxying" if remote else "Ready",
                     "endpoint": f"http://{out['metadata']['name']}.ai-models.svc:8000/v1"}
    return out


@pytest.fixture
def cluster(kmock: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The guide's seven samples, all serving except the Gaudi one (still downloading)."""
    kmock.resources[LLMMODELS] = kmock.ResourceInfo(
        kind="LLMModel", singular="llmmodel", namespaced=True,
        verbs={"list", "watch", "get", "create", "patch", "delete"})
    for path in GUIDE_SAMPLES:
        doc = serving(load_yaml(path))
        if doc["metadata"]["name"] == "qwen36-35b-gaudi":
            doc["status"] = {"phase": "Downloading"}
        kmock.objects[LLMMODELS, "ai-models", doc["metadata"]["name"]] = doc
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
        "clusters": [{"name": "kmock", "cluster": {"server": str(kmock.url)}}],
        "users": [{"name": "kmock", "user": {}}],
        "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "kmock"}}]}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return kmock


async def test_find_models_like_the_guide(cluster: Any) -> None:
    sys.path.insert(0, str(TOOL.parent))
    try:
        import query_models  # noqa: PLC0415
    finally:
        sys.path.remove(str(TOOL.parent))
    found = await asyncio.to_thread(query_models.find_models, domains=["reasoning"],
                                    max_vram_gib=24, context_min_k=128)
    assert [m["metadata"]["name"] for m in found] == [
        "gemma4-26b-amd", "gemma4-31b-nvidia", "qwen35-9b-cpu"]  # Gaudi: not Ready yet
    downloading = await asyncio.to_thread(query_models.find_models, phase="Downloading")
    assert [m["metadata"]["name"] for m in downloading] == ["qwen36-35b-gaudi"]
    request = next(r for r in cluster if r.resource == LLMMODELS)
    assert request.params["labelSelector"] == (
        "ai.example.io/domain-reasoning=true,ai.example.io/vram-tier in (cpu,8gb,16gb,24gb)")


async def test_the_script_runs_as_the_guide_runs_it(cluster: Any) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(TOOL), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env={**os.environ})
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert "Found 3 reasoning models with <=24 GiB VRAM and >=128K context:" in text
    assert "Found 1 AMD models:" in text and "Found 3 remote API models:" in text
    assert "gemma4-26b-amd" in text and "google/gemma-4-26b-a4b-it" in text


@pytest.mark.parametrize(("args", "expected"), [
    (["--domain", "reasoning", "--max-vram", "24", "--min-context", "128"],
     ["gemma4-26b-amd", "gemma4-31b-nvidia", "qwen35-9b-cpu"]),
    (["--domain", "reasoning", "--max-vram", "24", "--phase", "any"],
     ["gemma4-26b-amd", "gemma4-31b-nvidia", "qwen35-9b-cpu", "qwen36-35b-gaudi"]),
    (["-A", "--mode", "remote"], ["claude-opus47-remote", "gemini31-remote", "gpt55-remote"]),
    (["-n", "elsewhere"], []),
])
async def test_llmop_models_queries_the_cluster(cluster: Any, args: list[str],
                                                expected: list[str]) -> None:
    result = await asyncio.to_thread(CliRunner().invoke, cli, ["models", *args, "-o", "json"],
                                     env={"KUBECONFIG": os.environ["KUBECONFIG"]})
    assert result.exit_code == 0, result.output
    assert [m["name"] for m in yaml.safe_load(result.output)] == expected
