"""Prometheus rules: valid, unit-tested with promtool, and every rule covered by a test."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from k8s_schemas import validate_object
from promtool import RULES, rule_groups, run, write_rules

TESTS = Path(__file__).parent / "rules.test.yaml"


def test_prometheus_rule_matches_the_upstream_crd() -> None:
    assert validate_object(yaml.safe_load(RULES.read_text())) == []


def test_promtool_check_rules(tmp_path: Path) -> None:
    result = run("check", "rules", str(write_rules(tmp_path)), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_unit_tests(tmp_path: Path) -> None:
    write_rules(tmp_path)
    shutil.copy(TESTS, tmp_path / TESTS.name)
    result = run("test", "rules", TESTS.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_recording_rule_and_alert_has_a_test() -> None:
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    exprs = " ".join(t["expr"] for case in tests for t in case.get("promql_expr_test", []))
    firing = {t["alertname"] for case in tests for t in case.get("alert_rule_test", [])
              if t["exp_alerts"]}
    rules = [r for g in rule_groups() for r in g["rules"]]
    untested = [r["record"] for r in rules if "record" in r and r["record"] not in exprs]
    untested += [r["alert"] for r in rules if "alert" in r and r["alert"] not in firing]
    assert untested == []


def test_the_books_invalid_tpot_expression_is_not_used() -> None:
    """histogram_quantile needs the le label kept: sum by (le, ...) (rate(..._bucket[5m]))."""
    for rule in (r for g in rule_groups() for r in g["rules"]):
        expr = rule["expr"]
        if "histogram_quantile" in expr:
            assert "le)" in expr.replace(" ", "") or ",le" in expr.replace(" ", ""), expr
            assert "_bucket[" in expr, expr
