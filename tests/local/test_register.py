"""`llmop up --register`: this machine's models published into a real cluster, kept alive by a
Lease, withdrawn on stop; the operator there serves them like any remote model."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from pathlib import Path

from llm_operator.api import labels as L
from llm_operator.kube import Kube, from_kubeconfig
from llm_operator.local.register import Registration
from llm_operator.local.runtime import Runtime

from controlplane import ControlPlane
from localstack import example_dir, options, row, running

API = "ai.example.io/v1alpha1"


async def test_served_models_are_published_renewed_and_withdrawn_on_stop(
        tmp_path: Path, model_cache: Path, apiserver: ControlPlane) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", namespace)
    connection = from_kubeconfig(str(apiserver.kubeconfig))
    machine = "llmop-up-test-laptop"
    registration = Registration(connection, namespace, "127.0.0.1", machine,
                                renew_seconds=0.2)
    opts = dataclasses.replace(options(example_dir(tmp_path / "models"), tmp_path / "state",
                                       model_cache), register=registration)
    async with Kube(connection) as kube:
        async with running(opts) as up:
            assert row(up.snapshot(), "gemma3-270m")["phase"] == "Ready"
            snap = await up.until(lambda s: (s["registered"] or {}).get("models") == [
                "gemma3-270m"], 30)
            assert snap["registered"]["lease"] == machine
            model = await kube.get(API, "llmmodels", namespace, "gemma3-270m")
            assert model is not None
            port = up.gateway_url.rsplit(":", 1)[1].split("/")[0]
            assert model["spec"]["remoteApi"] == {
                "api": "openai", "baseUrl": f"http://127.0.0.1:{port}/v1",
                "apiKeySecret": machine}
            assert model["metadata"]["labels"][L.REGISTERED_BY] == machine
            first = await kube.get("coordination.k8s.io/v1", "leases", namespace, machine)
            assert first is not None
            await _renewed(up, kube, namespace, machine, first["spec"]["renewTime"])
            assert await kube.get("v1", "secrets", namespace, machine) is not None
        for api, plural, name in ((API, "llmmodels", "gemma3-270m"),
                                  ("coordination.k8s.io/v1", "leases", machine),
                                  ("v1", "secrets", machine)):
            assert await kube.get(api, plural, namespace, name) is None, plural


async def _renewed(up: Runtime, kube: Kube, namespace: str, machine: str, before: str) -> None:
    """The Lease's renewTime moves on (every 0.2 s here): waited for on the renewals."""
    assert up.registrar is not None
    for _ in range(10):
        up.registrar.renewed.clear()
        await asyncio.wait_for(up.registrar.renewed.wait(), 5)
        lease = await kube.get("coordination.k8s.io/v1", "leases", namespace, machine)
        if lease is not None and lease["spec"]["renewTime"] != before:
            return
    raise AssertionError("the Lease was not renewed")
