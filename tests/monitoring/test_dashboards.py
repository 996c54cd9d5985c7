"""Grafana dashboards: well-formed, valid PromQL, and only recording rules that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from promtool import REPO, rule_groups, run, write_rules

DASHBOARDS = sorted((REPO / "config" / "monitoring" / "dashboards").glob("*.json"))
GRAFANA_VARS = {"$__rate_interval": "5m", "$namespace": ".*", "$model": ".*", "$route": ".*"}


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def as_promql(expr: str) -> str:
    for var, value in GRAFANA_VARS.items():
        expr = expr.replace(var, value)
    return expr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_dashboard_is_well_formed(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"].startswith("llmop-") and dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) >= 6
    assert all(p["targets"] and "gridPos" in p for p in dashboard["panels"])
    assert "$" not in as_promql(" ".join(exprs(dashboard))), "unknown Grafana variable"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_query_is_valid_promql(path: Path, tmp_path: Path) -> None:
    queries = [as_promql(e) for e in exprs(json.loads(path.read_text()))]
    group = {"name": "dashboard-check", "rules": [
        {"record": f"dashboard:query{i}:check", "expr": q} for i, q in enumerate(queries)]}
    result = run("check", "rules", str(write_rules(tmp_path, [group])), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_recorded_series_used_by_panels_exist(path: Path) -> None:
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    used = set(re.findall(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", " ".join(
        exprs(json.loads(path.read_text())))))
    assert used and used <= recorded, used - recorded


def test_dashboards_ship_as_configmaps_for_the_grafana_sidecar() -> None:
    kustomization = yaml.safe_load((REPO / "config/monitoring/kustomization.yaml").read_text())
    generator = kustomization["configMapGenerator"][0]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(Path(f).name for f in generator["files"]) == [p.name for p in DASHBOARDS]
