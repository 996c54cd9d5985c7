"""Prometheus scrape jobs from PodMonitors, as the Prometheus Operator generates them.

For a Prometheus that runs beside the test node instead of the Operator: each PodMonitor
endpoint becomes a `kubernetes_sd_configs` pod job that keeps the pods its selector matches
on the endpoint's named port, labels the series with namespace, pod and container, copies
``podTargetLabels`` and names the job ``<namespace>/<name>`` (the Operator's own
generation, prometheus-operator's pkg/prometheus/promcfg.go, is the reference).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def _label(name: str) -> str:
    """A Kubernetes label key as Prometheus' discovery spells it (non-word chars -> _)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def pod_monitor_jobs(monitor: dict[str, Any], api_server: str, ca_file: Path, token: str
                     ) -> list[dict[str, Any]]:
    """One scrape job per endpoint of ``monitor`` (a PodMonitor), through ``api_server``."""
    meta, spec = monitor["metadata"], monitor["spec"]
    namespace = meta["namespace"]
    sd = {"role": "pod", "api_server": api_server, "namespaces": {"names": [namespace]},
          "tls_config": {"ca_file": str(ca_file)},
          "authorization": {"credentials": token}}
    keep = [{"action": "keep", "source_labels": [f"__meta_kubernetes_pod_label_{_label(k)}"],
             "regex": v} for k, v in sorted(spec["selector"]["matchLabels"].items())]
    copied = [{"source_labels": [f"__meta_kubernetes_pod_label_{_label(k)}"],
               "target_label": _label(k)} for k in spec.get("podTargetLabels", [])]
    jobs = []
    for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
        jobs.append({
            "job_name": f"podMonitor/{namespace}/{meta['name']}/{index}",
            "metrics_path": endpoint.get("path", "/metrics"),
            "scrape_interval": endpoint.get("interval", "30s"),
            "kubernetes_sd_configs": [sd],
            "relabel_configs": [
                *keep,
                {"action": "keep", "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                 "regex": endpoint["port"]},
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {"source_labels": ["__meta_kubernetes_pod_container_name"],
                 "target_label": "container"},
                *copied,
                {"target_label": "job", "replacement": f"{namespace}/{meta['name']}"},
            ],
        })
    return jobs
