#!/usr/bin/env python3
"""Query the LLMModel registry in a cluster, as in the guide's chapter 10 (STEP 8).

Runs inside the cluster (in-cluster config) or outside it (kubeconfig); needs the
`kubernetes` package (`pip install kubernetes`) and this repository's `src/` (or the
installed llm-operator package), whose registry module holds the query semantics.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

try:
    from llm_operator.api.validation import InvalidModel, parse_llmmodel
    from llm_operator.registry.query import SERVING_PHASES, Query, matches
except ImportError:  # running from a checkout without the package installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from llm_operator.api.validation import InvalidModel, parse_llmmodel
    from llm_operator.registry.query import SERVING_PHASES, Query, matches

from kubernetes import client, config


def load_config() -> None:
    """Load Kubernetes configuration from the cluster or the local kubeconfig."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG as it is now (the client reads it only once, when first imported).
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG"))


def find_models(  # noqa: PLR0917 - the guide's signature, kept for its callers
    namespace: str = "ai-models",
    domains: list[str] | None = None,
    max_vram_gib: int | None = None,
    context_min_k: int | None = None,
    accelerator_vendor: str | None = None,
    deployment_mode: str | None = None,
    phase: str | None = None,
) -> list[dict[str, Any]]:
    """LLMModels matching every given criterion, as raw Kubernetes objects.

    Criteria that labels can express go to the API server as a label selector; the rest
    (context window, phase) are filtered here. Without ``phase``, only Ready and Proxying
    models are returned.
    """
    load_config()
    query = Query(domains=tuple(domains or ()), max_vram_gib=max_vram_gib,
                  min_context_k=context_min_k, vendor=accelerator_vendor,
                  mode=deployment_mode, phases=(phase,) if phase else SERVING_PHASES)
    result = client.CustomObjectsApi().list_namespaced_custom_object(
        group="ai.example.io", version="v1alpha1", namespace=namespace, plural="llmmodels",
        label_selector=query.label_selector() or None)
    found = []
    for item in result.get("items", []):
        try:
            model = parse_llmmodel(item)
        except InvalidModel as exc:
            name = item.get("metadata", {}).get("name")
            print(f"skipping invalid LLMModel {name}: {exc}", file=sys.stderr)
            continue
        if matches(model, query):  # also re-checks the labels the server selected on
            found.append(item)
    return sorted(found, key=lambda m: m["metadata"]["name"])


def print_models(models: list[dict[str, Any]]) -> None:
    """Print a formatted summary of matching models."""
    if not models:
        print("No matching models found.")
        return
    print(f"{'NAME':<30} {'MODEL':<45} {'VENDOR':<12} "
          f"{'VRAM':<8} {'CONTEXT':<10} {'STATUS':<10} ENDPOINT")
    print("-" * 140)
    for m in models:
        spec, status = m.get("spec", {}), m.get("status", {})
        vendor = "remote" if spec.get("deploymentMode") == "remote" else spec.get(
            "acceleratorVendor", "nvidia")
        print(f"{m['metadata']['name']:<30} {spec.get('modelId', ''):<45} {vendor:<12} "
              f"{spec.get('resources', {}).get('vramPerAcceleratorGiB', 0):<8} "
              f"{spec.get('contextWindowK', 0):<10} {status.get('phase', ''):<10} "
              f"{status.get('endpoint', '')}")


if __name__ == "__main__":
    # Example: reasoning-capable models on any vendor with <=24 GiB VRAM and >=128K context.
    results = find_models(domains=["reasoning"], max_vram_gib=24, context_min_k=128)
    print(f"Found {len(results)} reasoning models with <=24 GiB VRAM and >=128K context:\n")
    print_models(results)
    print()
    amd_models = find_models(accelerator_vendor="amd")
    print(f"\nFound {len(amd_models)} AMD models:\n")
    print_models(amd_models)
    print()
    remote_models = find_models(deployment_mode="remote")
    print(f"\nFound {len(remote_models)} remote API models:\n")
    print_models(remote_models)
