"""The llmop command line: one clear line per problem, valid documents still processed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from llm_operator.api.crd import crd
from llm_operator.cli.main import COMMANDS, cli

from samples import EDGE_SAMPLES, GUIDE_SAMPLES, REPO, SAMPLES

DATA = Path(__file__).parent / "testdata"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_reports_every_problem_with_file_object_and_field() -> None:
    code, out, err = run("validate", "-f", str(DATA / "bad-mixed.yaml"))
    assert code == 1
    assert "ok " in out and "LLMModel ai-models/good-cpu" in out
    lines = [line for line in err.splitlines() if line.startswith("error")]
    expected = [
        ("LLMModel ai-models/vllm-cpu-too-small",
         "spec.resources.memoryGiB: resources.memoryGiB is too small for vLLM"),
        ("LLMModel ai-models/vllm-cpu-too-small",
         "spec.scaling.minReplicas: scaling.minReplicas must"),
        ("LLMModel remote-no-api", "spec.gpus: unknown field"),
        ("ConfigMap not-a-model", "not an LLMModel"),
    ]
    for obj, words in expected:
        assert any(str(DATA / "bad-mixed.yaml") in line and obj in line and words in line
                   for line in lines), (obj, words, lines)
    assert len(lines) == len(expected)


def test_validate_refuses_a_placement_the_gpu_measurements_rule_out() -> None:
    code, _, err = run("validate", "-f", str(DATA / "qwen3-30b-a3b-on-rtx5090.yaml"))
    assert code == 1
    assert ("LLMModel ai-models/qwen3-30b-a3b: spec.resources.acceleratorCount: needs ~37.1 GiB "
            "but 1x NVIDIA RTX 5090 at 95% gives 30.4 GiB") in err


@pytest.mark.parametrize(("given", "judge_missing"), [("judged", False),
                                                      ("judged/guarded.yaml", True)])
def test_a_guards_judge_must_be_among_the_documents(given: str, judge_missing: bool) -> None:
    code, out, err = run("validate", "-f", str(DATA / given))
    assert code == judge_missing
    missing = ("LLMModel ai-models/guarded: spec.guardrails.output[0].judge.model: guard "
               "safety: no LLMModel among the documents given is "
               "'meta-llama/Llama-Guard-3-1B'")
    assert (missing in err) == judge_missing
    assert ("ok " in out and "LLMModel ai-models/guarded" in out) != judge_missing


def test_malformed_yaml_names_the_line() -> None:
    code, _, err = run("validate", "-f", str(DATA / "malformed.yaml"))
    assert code == 1
    assert "malformed YAML (line" in err and "malformed.yaml" in err


def test_samples_validate_cleanly() -> None:
    code, out, err = run("validate", "-f", str(SAMPLES))
    assert (code, err) == (0, "")
    assert out.count("ok ") == len(GUIDE_SAMPLES) + len(EDGE_SAMPLES)


def test_render_outputs_valid_models_and_fails_for_the_rest() -> None:
    code, out, err = run("render", "-f", str(DATA / "bad-mixed.yaml"))
    assert code == 1 and "vllm-cpu-too-small" in err
    kinds = [d["kind"] for d in yaml.safe_load_all(out)]
    assert kinds == ["PersistentVolumeClaim", "Deployment", "Service", "PodDisruptionBudget",
                     "ScaledObject", "ServiceMonitor"]


def test_render_json_is_a_list() -> None:
    code, out, _ = run("render", "-f", str(SAMPLES / "gpt55-remote.yaml"), "-o", "json",
                       "--owner-uid", "u-1")
    assert code == 0
    doc = json.loads(out)
    assert doc["kind"] == "List"
    assert doc["items"][0]["metadata"]["ownerReferences"][0]["uid"] == "u-1"


def test_plan_json_fields() -> None:
    code, out, _ = run("plan", "-f", str(SAMPLES), "-o", "json")
    assert code == 0
    plans = {p["name"]: p for p in json.loads(out)}
    assert plans["gemma4-26b-amd"]["verdict"] == "tight"
    assert plans["llama4-maverick"]["tensorParallelSize"] == 4
    for p in plans.values():
        assert {"name", "estimatedMemoryGiB", "acceleratorCount", "tensorParallelSize",
                "verdict", "reason"} <= set(p)


def test_plan_table_shows_verdicts() -> None:
    code, out, _ = run("plan", "-f", str(SAMPLES / "qwen35-9b-cpu.yaml"))
    assert code == 0 and "qwen35-9b-cpu" in out and "fits" in out


def test_plan_sums_up_each_pool_against_an_engine_per_model() -> None:
    code, out, _ = run("plan", "-f", str(REPO / "examples" / "cluster" / "model-pool"))
    assert code == 0
    (row,) = [line for line in out.splitlines() if "gemma-small" in line]
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[0] == "gemma-small" and cells[2] == "2"
    assert float(cells[3]) < float(cells[4])  # two loaded need less than three engines
    assert cells[6] == "1000m"  # two members of 500m loaded at once, each at its own CPU
    assert cells[7] == "pool-reload: 10m CPU, 64 MiB"  # beside the engine in its pod
    assert cells[8] == "1..3"  # the members' default scaling: the pool scales within it


def test_validate_names_the_pool_field_of_a_member_left_alone() -> None:
    code, _, err = run("validate", "-f",
                       str(REPO / "examples" / "cluster" / "model-pool" / "gemma-pool-qa.yaml"))
    assert code == 1
    assert "gemma-pool-qa: spec.pool.name: pool gemma-small has no other member among the " \
        "documents given" in " ".join(err.split())


def test_crd_command_matches_the_generator(tmp_path: Path) -> None:
    target = tmp_path / "crd.yaml"
    code, _, _ = run("crd", "-o", str(target))
    assert code == 0 and yaml.safe_load(target.read_text()) == crd()


def test_bad_settings_file_is_a_usage_error(tmp_path: Path) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("storage: {accessMode: Sometimes}\n")
    code, _, err = run("render", "-f", str(SAMPLES), "--settings", str(settings))
    assert code == 2 and "storage.accessMode" in err


OIDC = ["--oidc-issuer", "https://dex.example.com", "--oidc-client-id", "c",
        "--oidc-client-secret-file", "{tmp}/secret", "--oidc-session-key-file", "{tmp}/session"]


@pytest.mark.parametrize(("args", "expected"), [
    (["--keys-file", "{tmp}/absent.yaml"], "invalid client keys file:\n{tmp}/absent.yaml: "
     "cannot read"),
    (["--keys-file", "{tmp}/keys.yaml"], "invalid client keys file"),
    (["--redis-password-file", "{tmp}/pw"], "--redis-password-file needs --redis-url"),
    (["--redis-url", "http://redis:6379"], "redis.url"),
    (["--settings", "{tmp}/wait.yaml"], "{tmp}/wait.yaml: flowControl.bands.0: band 'batch': "
     "maxWaitSeconds 0 lets no request wait"),
    (["--settings", "{tmp}/negative.yaml"], "{tmp}/negative.yaml: "
     "flowControl.bands.0.maxQueue: Input should be greater than or equal to 0"),
    (["--settings", "{tmp}/unknown.yaml"], "{tmp}/unknown.yaml: flowcontrol: unknown "
     "setting; the router's are flowControl, tracing, batch"),
    (["--batch-lease", "batches"], "--batch-lease 'batches': give NAMESPACE/NAME"),
    (["--peers-service", "ns/router/x"], "--peers-service 'ns/router/x': give NAMESPACE/NAME"),
    (["--batch-lease", "ns/batches"], "batch: enabled needs a store: batch.path (a SQLite "
     "file) or redis"),
    (["--settings", "{tmp}/tracing.yaml"], "tracing.sampleRatio: Input should be less than "
     "or equal to 1"),
    (["--oidc-client-id", "c", "--oidc-admin", "group:a"], "--oidc-client-id, --oidc-admin: "
     "sign-in at an OpenID Connect issuer needs --oidc-issuer too"),
    (["--oidc-issuer", "https://dex.example.com"], "--oidc-issuer needs --oidc-client-id and "
     "--oidc-client-secret-file"),
    ([*OIDC[:4], "--oidc-client-secret-file", "{tmp}/missing",
      "--oidc-session-key-file", "{tmp}/session"],
     "--oidc-client-secret-file {tmp}/missing: No such file or directory"),
    (["--oidc-issuer", "dex.example.com", *OIDC[2:], "--oidc-allow", "everyone"],
     "OpenID Connect sign-in: issuer 'dex.example.com': give an https:// URL"),
    ([*OIDC, "--oidc-allow", "everyone", "--oidc-admin", "admins"],
     "'admins': give KIND:VALUE"),
    ([*OIDC, "--oidc-admin", "group:a"], "say who may look once signed in: --oidc-allow"),
    ([*OIDC[:6], "--oidc-session-key-file", "{tmp}/secret", "--oidc-allow", "everyone"],
     "the session key is shorter than 32 characters"),
    ([*OIDC, "--oidc-allow", "everyone", "--oidc-admin", "group:a"],
     "--oidc-admin administers client keys: give --keys-file"),
])
def test_router_settings_are_checked_before_it_connects(tmp_path: Path, args: list[str],
                                                         expected: str) -> None:
    (tmp_path / "keys.yaml").write_text("keys: [{id: team, sha256: not-a-digest}]\n")
    (tmp_path / "wait.yaml").write_text("flowControl: {defaultBand: batch, bands: "
                                        "[{name: batch, priority: 0, maxWaitSeconds: 0}]}\n")
    (tmp_path / "negative.yaml").write_text("flowControl: {defaultBand: batch, bands: "
                                            "[{name: batch, priority: 0, maxQueue: -1}]}\n")
    (tmp_path / "unknown.yaml").write_text("flowcontrol: {enabled: false}\n")
    (tmp_path / "tracing.yaml").write_text("tracing: {sampleRatio: 2}\n")
    (tmp_path / "secret").write_text("the-client-secret\n")
    (tmp_path / "session").write_text("0123456789abcdef0123456789abcdef\n")
    code, _, err = run("router", *(a.format(tmp=tmp_path) for a in args))
    assert code != 0 and expected.format(tmp=tmp_path) in err


@pytest.mark.parametrize("command", [["router"], ["gateway", "--config", "{tmp}/gw.yaml"]])
def test_an_unusable_proxy_variable_stops_the_gateway_before_it_serves(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    (tmp_path / "gw.yaml").write_text(
        "routes: [{models: [m], upstream: {baseUrl: 'https://api.openai.com/v1'}}]\n")
    monkeypatch.setenv("HTTPS_PROXY", "socks5://user:secret@vpn:1080")
    code, _, err = run(*(a.format(tmp=tmp_path) for a in command))
    assert code != 0
    assert "HTTPS_PROXY: the gateway speaks to proxies over http:// only" in err
    assert "secret" not in err


def test_no_documents_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run("validate", "-f", str(tmp_path))
    assert code == 2 and "no YAML documents" in err


@pytest.mark.parametrize("command", ["validate", "plan", "render", "crd", "models", "gateway",
                                     "operator", "mcp", "up", "chat", "status", "down", "router"])
def test_every_command_has_help(command: str) -> None:
    code, out, _ = run(command, "--help")
    assert code == 0 and "Usage:" in out and len(out) > 200


def test_top_level_help_lists_up_and_chat_first_with_whole_summaries() -> None:
    result = CliRunner().invoke(cli, ["--help"], terminal_width=80)
    listing = result.output.split("Commands:\n", 1)[1]
    names = [line.split()[0] for line in listing.splitlines() if line.startswith("  ")
             and not line.startswith("   ")]
    assert names[:2] == ["up", "chat"] and sorted(names) == sorted(COMMANDS)
    assert "..." not in listing  # click's truncation mark


# (command, the modules of llm_operator.cli it loads: its own, and what it calls)
OWN_MODULES = [
    ("status", {"main", "local"}),
    ("model-fetch", {"main", "fetch", "verify"}),
    ("model-verify", {"main", "verify"}),
    ("lora-sync", {"main", "lora_sync"}),
    ("router", {"main", "router"}),
    ("validate", {"main", "documents", "outcomes", "loading"}),
]


@pytest.mark.parametrize(("command", "modules"), OWN_MODULES, ids=[c for c, _ in OWN_MODULES])
def test_a_command_imports_its_own_module_not_every_commands(command: str,
                                                             modules: set[str]) -> None:
    """An init container's `llmop model-fetch` or a user's `llmop status` starts in a
    fraction of the 1.1 s that importing every command took."""
    probe = ("import sys\nfrom llm_operator.cli.main import cli\n"
             f"try:\n    cli([{command!r}, '--help'], standalone_mode=False)\n"
             "except SystemExit:\n    pass\n"
             "print(' '.join(m for m in sys.modules if m.startswith('llm_operator.cli.')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            check=True).stdout.splitlines()[-1]
    assert {m.removeprefix("llm_operator.cli.") for m in loaded.split()} == modules


def test_every_listed_command_is_the_command_of_its_name() -> None:
    context = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert command is not None and command.name == name, name


def test_readme_quick_start_commands_exist() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make up" in readme and "make test" in readme
    makefile = (REPO / "Makefile").read_text()
    assert "\nup: $(STAMP)\n\t$(BIN)/llmop up examples/local $(UP_ARGS)\n" in makefile


@pytest.mark.parametrize("command", [[], *[[name] for name in sorted(COMMANDS)]],
                         ids=lambda c: " ".join(["llmop", *c]))
def test_help_keeps_examples_verbatim(command: list[str]) -> None:
    """Example blocks stay one command per line (click's \\b marker, not a literal)."""
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=100)
    assert result.exit_code == 0
    assert "\\b" not in result.output
    if "Examples:" in result.output:
        after = result.output.split("Examples:", 1)[1].splitlines()[1]
        assert after.strip().startswith("llmop ")


def test_the_readmes_bad_document_example_is_what_validate_prints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The README shows docs/examples/bad.yaml's errors: they are the ones given today."""
    monkeypatch.chdir(REPO)  # the path as the README gives it
    readme = (REPO / "README.md").read_text()
    block = readme.split("llmop validate -f docs/examples/bad.yaml`):\n\n```\n", 1)[1]
    shown = block.split("\n```", 1)[0]
    code, _, err = run("validate", "-f", "docs/examples/bad.yaml")
    assert code == 1 and err.strip() == shown
