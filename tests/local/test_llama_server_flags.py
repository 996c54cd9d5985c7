"""The flags we give llama-server are flags the pinned llama-server knows, meaning what we mean.

A flag whose meaning changed under us (``--chat-template gemma`` read as Jinja text once
llama.cpp turned Jinja on by default) or that a release removed is found here: every
argument rendered for every shipped example and sample is looked up in the pinned binary's
own ``--help``, and so is its list of builtin chat templates.
"""

from __future__ import annotations

import functools
import re
import subprocess
from typing import Any

import pytest
import yaml

from llm_operator.api.chat_templates import LLAMACPP_BUILTINS
from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.llama_router import router_args
from llm_operator.profiles.llamaserver import Where, llama_server_args

from localstack import llama_server
from samples import REPO

FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
DOCUMENTS = sorted([*(REPO / "examples").rglob("*.yaml"), *(REPO / "config/samples").rglob(
    "*.yaml")])


@functools.cache
def help_text() -> str:
    done = subprocess.run([str(llama_server()), "--help"], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout + done.stderr


def known_flags(text: str) -> set[str]:
    """The long flags of each option line (its first column), negated forms included."""
    flags: set[str] = set()
    for line in text.splitlines():
        if line.startswith("-") and not line.startswith("-----"):
            names = re.sub(r",\s+", ", ", line)  # "-a,    --alias STRING  set ..."
            flags.update(FLAG.findall(re.split(r"\s{2,}", names, maxsplit=1)[0]))
    return flags


def builtin_templates(text: str) -> set[str]:
    """The names after the first "list of built-in templates:"."""
    lines = text.split("list of built-in templates:\n", 1)[1].splitlines()
    names: list[str] = []
    for line in lines:
        if not line.startswith(" ") or "(env:" in line:
            break
        names += [n.strip() for n in line.split(",") if n.strip()]
    return set(names)


def _llama_models() -> list[tuple[str, Any]]:
    found = []
    for path in DOCUMENTS:
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "LLMModel" and doc["spec"].get(
                    "inferenceEngine") in {"llamacpp", "ollama"}:
                found.append((f"{path.relative_to(REPO)}:{doc['metadata']['name']}",
                              parse_llmmodel(doc)))
    return found


MODELS = _llama_models()


def test_the_builtin_template_names_are_the_pinned_engines() -> None:
    assert builtin_templates(help_text()) == set(LLAMACPP_BUILTINS)


@pytest.mark.parametrize(("where", "model"), MODELS, ids=[m[0] for m in MODELS])
def test_every_rendered_flag_is_one_llama_server_knows(where: str, model: Any) -> None:
    spec = model.spec
    on_gpu = spec.accelerator_vendor != "cpu"
    args = llama_server_args(spec, Where("/m.gguf", "0.0.0.0", 8000, ("/a.gguf",),
                                         on_accelerator=on_gpu)).args
    unknown = {a for a in args if a.startswith("--")} - known_flags(help_text())
    assert not unknown, f"{where}: llama-server does not know {sorted(unknown)}"


def test_the_pool_routers_own_flags_are_known() -> None:
    args = router_args("0.0.0.0", 8000, "/etc/preset.ini", 2)
    assert {a for a in args if a.startswith("--")} <= known_flags(help_text())


def test_a_flag_llama_server_does_not_know_is_caught() -> None:
    """The check itself: a made-up flag and a removed one are not in the help."""
    assert {"--chat-template", "--no-jinja", "--ctx-size", "--alias"} <= known_flags(help_text())
    assert not {"--no-such-flag", "--memory-f32"} & known_flags(help_text())
