"""On a real cluster: the CPU sample becomes its children and an observed status, then goes.

    kind create cluster && KUBECONFIG=~/.kube/config .venv/bin/pytest -m e2e tests/e2e

The operator runs in-process with your kubeconfig; the model is not expected to finish
downloading (9B weights), only to be placed, rendered, applied and observed.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
from typing import Any

import pytest
import yaml

from llm_operator.kube import Kube, from_kubeconfig, path_of

from operators import running_operator
from samples import REPO, sample_doc

pytestmark = pytest.mark.e2e
NS = "ai-models"
API = "ai.example.io/v1alpha1"
SERVING_OR_ON_THE_WAY = {"Pending", "Downloading", "Starting", "Ready", "Degraded"}


async def until(check: Any, timeout: float) -> Any:
    """Poll a real cluster (there is no event to wait on from outside) until check() is truthy."""
    async with asyncio.timeout(timeout):
        while not (found := await check()):
            await asyncio.sleep(1)
        return found


async def apply_raw(kube: Kube, path: str, obj: dict[str, Any]) -> None:
    await kube.request("PATCH", path, body=obj, content_type="application/apply-patch+yaml",
                       params={"fieldManager": "llm-operator-e2e", "force": "true"})


async def test_the_cpu_sample_on_a_real_cluster() -> None:
    conn = from_kubeconfig(os.environ["KUBECONFIG"])
    crd = yaml.safe_load((REPO / "config/crd/bases/ai.example.io_llmmodels.yaml").read_text())
    doc = copy.deepcopy(sample_doc("qwen35-9b-cpu"))
    name = doc["metadata"]["name"]
    async with Kube(conn) as kube:
        await apply_raw(kube, path_of("apiextensions.k8s.io/v1", "customresourcedefinitions",
                                      None, crd["metadata"]["name"]), crd)
        for priority_class in yaml.safe_load_all(
                (REPO / "config/priority/priority-classes.yaml").read_text()):
            await apply_raw(kube, path_of("scheduling.k8s.io/v1", "priorityclasses", None,
                                          priority_class["metadata"]["name"]), priority_class)
        await apply_raw(kube, path_of("v1", "namespaces", None, NS),
                        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        await apply_raw(kube, path_of("v1", "secrets", NS, "hf-token"), {
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "hf-token",
                                                               "namespace": NS},
            "data": {"token": base64.b64encode(b"not-a-real-token").decode()}})
        await until(lambda: kube.get("apiextensions.k8s.io/v1", "customresourcedefinitions",
                                     None, crd["metadata"]["name"]), 30)
        async with running_operator(conn, timeout=60, resync_seconds=30):
            await apply_raw(kube, path_of(API, "llmmodels", NS, name), doc)

            async def placed() -> dict[str, Any] | None:
                model = await kube.get(API, "llmmodels", NS, name)
                status = (model or {}).get("status") or {}
                conditions = {c["type"]: c for c in status.get("conditions", [])}
                ok = status.get("phase") in SERVING_OR_ON_THE_WAY and \
                    conditions.get("Placed", {}).get("status") == "True"
                return model if ok else None

            model = await until(placed, 120)
            for plural, api, child in (("deployments", "apps/v1", name),
                                       ("services", "v1", name),
                                       ("persistentvolumeclaims", "v1", f"{name}-model-cache")):
                assert await kube.get(api, plural, NS, child) is not None, plural
            assert model["metadata"]["labels"]["ai.example.io/accelerator-vendor"] == "cpu"
            await kube.delete(API, "llmmodels", NS, name)
            await until(lambda: _gone(kube, name), 120)


async def _gone(kube: Kube, name: str) -> bool:
    return await kube.get(API, "llmmodels", NS, name) is None and \
        await kube.get("apps/v1", "deployments", NS, name) is None
