"""Installing as a user would, with kubectl on a real API server: CRD, kustomizations, columns."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from controlplane import ControlPlane
from samples import REPO, sample_doc

LLMOP = str(Path(sys.executable).parent / "llmop")


def test_llmop_crd_pipes_into_kubectl_apply(apiserver: ControlPlane) -> None:
    crd = subprocess.run([LLMOP, "crd"], capture_output=True, text=True, check=True).stdout
    out = apiserver.kubectl("apply", "-f", "-", stdin=crd).stdout
    assert out.strip() in {"customresourcedefinition.apiextensions.k8s.io/"
                           f"llmmodels.ai.example.io {word}" for word in ("unchanged",
                                                                           "configured")}


def test_the_default_kustomization_installed_the_operator(apiserver: ControlPlane) -> None:
    """The session fixture ran `kubectl apply -k config/default`; it is all there."""
    found = apiserver.kubectl(
        "get", "deployment/llm-operator", "serviceaccount/llm-operator",
        "configmap/llm-operator-settings", "role/llm-operator-leader-election",
        "-n", "llm-operator-system", "-o", "name").stdout.split()
    assert len(found) == 4
    assert apiserver.kubectl("get", "clusterrole/llm-operator", "clusterrolebinding/"
                             "llm-operator", "-o", "name").stdout.split()


def test_kubectl_get_shows_vendor_and_engine_only_for_local_models(
        apiserver: ControlPlane) -> None:
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", namespace)
    local = sample_doc("gemma4-31b-nvidia")
    del local["spec"]["acceleratorVendor"]  # the default still applies to a local model
    docs = [sample_doc("gpt55-remote"), local, sample_doc("qwen35-9b-cpu")]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
    apiserver.kubectl("apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(docs))
    rows = apiserver.kubectl("get", "lm", "-n", namespace, "-o",
                             "custom-columns=NAME:.metadata.name,VENDOR:.spec.acceleratorVendor,"
                             "ENGINE:.spec.inferenceEngine", "--no-headers",
                             "--sort-by=.metadata.name").stdout.split("\n")
    assert [row.split() for row in rows if row] == [
        ["gemma4-31b-nvidia", "<none>", "vllm"],
        ["gpt55-remote", "<none>", "<none>"],
        ["qwen35-9b-cpu", "cpu", "ollama"],
    ]
    table = apiserver.kubectl("get", "lm", "gpt55-remote", "-n", namespace).stdout
    assert "nvidia" not in table and "vllm" not in table


def test_the_monitoring_kustomization_brings_its_namespace(apiserver: ControlPlane) -> None:
    """It used to fail with `namespaces "monitoring" not found` on a cluster without one."""
    if apiserver.kubectl("get", "namespace", "monitoring", check=False).returncode == 0:
        pytest.skip("namespace monitoring exists already in this control plane")
    apiserver.kubectl("apply", "-k", str(REPO / "config" / "monitoring"))
    found = apiserver.kubectl("get", "prometheusrules,configmaps", "-n", "monitoring",
                              "-l", "app.kubernetes.io/part-of=llm-operator",
                              "-o", "name").stdout.split()
    assert "configmap/llm-operator-dashboards" in found
    assert any(name.startswith("prometheusrule") for name in found)


def test_the_redis_kustomization_applies_as_documented(apiserver: ControlPlane) -> None:
    """The commands in config/redis/kustomization.yaml, on a real API server (no kubelet:
    the pod itself is not started here; the gateway's Redis path is tested against Debian's
    redis-server in tests/gateway)."""
    if apiserver.kubectl("get", "namespace", "ai-models", check=False).returncode != 0:
        apiserver.kubectl("create", "namespace", "ai-models")
    apiserver.kubectl("-n", "ai-models", "create", "secret", "generic", "llmop-redis",
                      "--from-literal=password=" + uuid.uuid4().hex)
    apiserver.kubectl("apply", "-k", str(REPO / "config" / "redis"))
    found = apiserver.kubectl("get", "statefulset,service,networkpolicy", "-n", "ai-models",
                              "-l", "app.kubernetes.io/name=llmop-redis", "-o",
                              "name").stdout.split()
    assert sorted(found) == ["networkpolicy.networking.k8s.io/llmop-redis",
                             "service/llmop-redis", "statefulset.apps/llmop-redis"]


def test_llmop_plan_cluster_shows_the_gpu_queue(apiserver: ControlPlane, tmp_path: Path) -> None:
    """Read from the cluster as kubectl would: nodes, models, which run and which wait."""
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", namespace)
    pool = {"nvidia.com/gpu.present": "true", "pool": namespace}
    apiserver.add_node(f"gpu-{namespace}", {**pool, "nvidia.com/gpu.memory": "81559"},
                       {"nvidia.com/gpu": "2"})
    settings = tmp_path / "settings.yaml"
    settings.write_text(yaml.safe_dump({"vendors": {"nvidia": {"nodeSelector": pool}}}))
    docs = []
    for name, priority in (("first", "normal"), ("second", "high"), ("third", "low")):
        doc = sample_doc("gemma4-31b-nvidia")
        doc["metadata"].update(name=name, namespace=namespace)
        doc["spec"].update(priority=priority, scaling={"minReplicas": 1, "maxReplicas": 1})
        doc["spec"]["resources"]["acceleratorCount"] = 2
        docs.append(doc)
    apiserver.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    out = subprocess.run(
        [LLMOP, "plan", "--cluster", "-n", namespace, "--settings", str(settings)],
        capture_output=True, text=True, check=True, timeout=60,
        env={**os.environ, "KUBECONFIG": str(apiserver.kubeconfig), "COLUMNS": "200"}).stdout
    rows = {m.group(1): line for line in out.splitlines()
            if (m := re.search(rf"{namespace}/(\w+)", line))}
    assert "starts now" in rows["second"], out  # high priority first
    assert "waiting #1" in rows["first"] and "waiting #2" in rows["third"]
    assert f"gpu-{namespace}" in out and "2 nvidia.com/gpu" in out
    apiserver.kubectl("delete", "node", f"gpu-{namespace}")
