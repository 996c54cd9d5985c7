"""`llmop keys`: the key it prints is admitted by the entry it prints, and nothing else leaks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from llm_operator.access.keyring import parse_keyring
from llm_operator.cli.main import cli


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), input=stdin)
    return result.exit_code, result.output


def test_new_prints_a_key_its_entry_admits() -> None:
    code, out = run("keys", "new", "search", "--model", "gpt-*", "--rpm", "60",
                    "--budget-usd", "5", "--period", "week", "-o", "json")
    assert code == 0
    made = json.loads(out)
    ring = parse_keyring({"keys": [made["entry"]]})
    key = ring.find(made["key"])
    assert key is not None and key.id == "search" and key.may_use("gpt-5.5")
    assert key.requests_per_minute == 60 and key.budget is not None
    assert (key.budget.usd, key.budget.period) == (5, "week")


def test_new_in_text_shows_the_key_once_and_a_pasteable_entry() -> None:
    code, out = run("keys", "new", "batch", "--tool", "gpt55")
    assert code == 0
    key = out.splitlines()[1].strip()
    entry = yaml.safe_load(out.split("in the keys file:\n", 1)[1])
    assert parse_keyring({"keys": entry}).find(key) is not None
    assert out.count(key) == 1


@pytest.mark.parametrize(("args", "message"), [
    (("keys", "new", "has space"), "Invalid value for ID: use letters, digits"),
    (("keys", "new", "a", "--rpm", "0"), "0 is not in the range x>=1"),
    (("keys", "new", "a", "--budget-usd", "0"), "0.0 is not in the range x>0"),
    (("keys", "hash"), "pipe the key on stdin"),
])
def test_bad_arguments_say_what_to_fix(args: tuple[str, ...], message: str) -> None:
    code, out = run(*args, stdin="")
    assert code == 2 and message in out


def test_hash_matches_what_new_stores() -> None:
    made = json.loads(run("keys", "new", "x", "-o", "json")[1])
    code, out = run("keys", "hash", stdin=made["key"] + "\n")
    assert code == 0 and out.strip() == made["entry"]["sha256"]


def test_check_lists_allowances_or_names_the_bad_field(tmp_path: Path) -> None:
    made = json.loads(run("keys", "new", "x", "--model", "gpt-*", "--tpm", "1000",
                          "-o", "json")[1])
    good = tmp_path / "keys.yaml"
    good.write_text(yaml.safe_dump({"keys": [made["entry"]]}))
    code, out = run("keys", "check", str(good))
    assert code == 0 and out.splitlines() == ["x: models=gpt-* tpm=1000",
                                              f"{good}: 1 key(s), valid"]
    assert made["entry"]["sha256"] not in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("keys:\n  - {id: x, sha256: nope}\n")
    code, out = run("keys", "check", str(bad))
    assert code == 1 and f"{bad}: keys.0.sha256: String should match pattern" in out


@pytest.mark.parametrize(("config", "message"), [
    (None, "say which gateway: --config FILE"),
    ({"routes": [{"models": ["m"], "upstream": {"baseUrl": "http://x/v1"}}]},
     "this gateway keeps spend in each process (no redis section in its config)"),
    ({"redis": {"url": "http://x"}, "routes": []}, "redis.url: String should match pattern"),
])
def test_gateway_spend_says_what_is_missing(tmp_path: Path, config: object,
                                            message: str) -> None:
    args = ["gateway", "spend"]
    if config is not None:
        path = tmp_path / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        args += ["--config", str(path)]
    code, out = run(*args)
    assert code != 0 and message in out
