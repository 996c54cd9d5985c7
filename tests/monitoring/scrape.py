"""Prometheus scrape jobs from PodMonitors, as the Prometheus Operator generates them.

For a Prometheus that runs beside the test node instead of the Operator. Debian's
Prometheus is built without Kubernetes service discovery, so the discovery is done here
with the pods the API server lists: each PodMonitor endpoint becomes a job over the pods its
selector matches, at the endpoint's named port and path, each target labelled as the
Operator's relabelling labels it (namespace, pod, container, the ``podTargetLabels``, job
``<namespace>/<name>``; prometheus-operator's pkg/prometheus/promcfg.go is the reference).
"""

from __future__ import annotations

import re
from typing import Any


def _label(name: str) -> str:
    """A Kubernetes label key as a Prometheus label name (non-word characters -> _)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def _selected(pod: dict[str, Any], selector: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels", {})
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def pod_monitor_jobs(monitor: dict[str, Any], pods: list[dict[str, Any]]
                     ) -> list[dict[str, Any]]:
    """One scrape job per endpoint of ``monitor`` (a PodMonitor) over ``pods`` (listed)."""
    meta, spec = monitor["metadata"], monitor["spec"]
    namespace = meta["namespace"]
    jobs = []
    for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
        targets = []
        for pod in pods:
            if pod["metadata"]["namespace"] != namespace or not _selected(pod, spec["selector"]) \
                    or not pod["status"].get("podIP"):
                continue
            for container in pod["spec"]["containers"]:
                for port in container.get("ports", []):
                    if port.get("name") != endpoint["port"]:
                        continue
                    labels = {"namespace": namespace, "pod": pod["metadata"]["name"],
                              "container": container["name"],
                              "job": f"{namespace}/{meta['name']}"}
                    for key in spec.get("podTargetLabels", []):
                        if key in pod["metadata"].get("labels", {}):
                            labels[_label(key)] = pod["metadata"]["labels"][key]
                    targets.append({"targets": [f"{pod['status']['podIP']}:"
                                                f"{port['containerPort']}"],
                                    "labels": labels})
        jobs.append({"job_name": f"podMonitor/{namespace}/{meta['name']}/{index}",
                     "metrics_path": endpoint.get("path", "/metrics"),
                     "scrape_interval": endpoint.get("interval", "30s"),
                     "static_configs": targets})
    return jobs
