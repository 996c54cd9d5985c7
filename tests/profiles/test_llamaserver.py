"""llama-server's arguments, built once for the cluster's pod and for `llmop up` (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.profiles.llama_router import Member, models_preset
from llm_operator.profiles.llamaserver import Where, llama_server_args, lora_path_problem

from samples import local_doc

POD = Where("/model-cache/model.gguf", "0.0.0.0", 8000)
LAPTOP = Where("/m.gguf", "127.0.0.1", 4100, cores=4)
HEAD = ["--model", "/m.gguf", "--alias", "gemma-3-270m", "--host", "127.0.0.1", "--port",
        "4100", "--metrics"]


def _spec(**fields: Any) -> Any:
    doc = copy.deepcopy(local_doc("gemma3-270m"))
    doc["spec"].update({"llamaCpp": None, "engineArgs": None, **fields})
    return parse_llmmodel(doc).spec


def test_a_pod_and_a_laptop_differ_only_in_where() -> None:
    spec = _spec(engineArgs={"ctx-size": "4096"}, llamaCpp={"parallelSlots": 8})
    pod = llama_server_args(spec, POD).args
    here = llama_server_args(spec, LAPTOP).args
    assert pod[:8] == ("--model", "/model-cache/model.gguf", "--alias", "gemma-3-270m",
                       "--host", "0.0.0.0", "--port", "8000")
    assert pod[8:] == here[8:] == ("--metrics", "--ctx-size", "32768", "--threads", "2",
                                   "--parallel", "8", "--cache-ram", "256", "--n-predict", "256")


CACHE = ["--cache-ram", "256"]  # the host KV tier's default, always given


@pytest.mark.parametrize(("fields", "where", "tail"), [
    ({}, LAPTOP, ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", *CACHE,
                  "--n-predict", "256"]),
    # flash-attn takes on/off/auto: a bare --flash-attn would swallow the next flag
    ({"engineArgs": {"flash-attn": "true", "threads": "3"}}, LAPTOP,
     ["--ctx-size", "32768", "--parallel", "1", *CACHE, "--n-predict", "256",
      "--flash-attn", "on", "--threads", "3"]),
    ({"llamaCpp": {"flashAttention": False, "mlock": True, "parallelSlots": 2},
      "engineArgs": {"n-predict": "-1", "ctx-size": "1024"}}, LAPTOP,
     ["--ctx-size", "2048", "--threads", "2", "--parallel", "2", *CACHE, "--flash-attn", "off",
      "--load-mode", "mmap+mlock", "--n-predict", "-1"]),
    # one slot and ctx-size given: passed on as it is
    ({"engineArgs": {"ctx-size": "1024", "cache-type-k": "q8_0"}}, LAPTOP,
     ["--threads", "2", "--parallel", "1", *CACHE, "--n-predict", "256",
      "--cache-type-k", "q8_0", "--ctx-size", "1024"]),
    ({"resources": {"acceleratorCount": 0, "cpuMillicores": 16000, "memoryGiB": 2}}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "4", "--parallel", "1", *CACHE, "--n-predict", "256"]),
    ({"domains": ["embedding"]}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", *CACHE, "--n-predict", "256",
      "--embeddings"]),
    ({}, Where("/m.gguf", "127.0.0.1", 4100, ("/a.gguf", "/b.gguf"), on_accelerator=True),
     ["--ctx-size", "32768", "--n-gpu-layers", "999", "--parallel", "1", *CACHE,
      "--n-predict", "256", "--lora-scaled", "/a.gguf:0", "--lora-scaled", "/b.gguf:0"]),
    # the declared tier, in MiB (rounded up), and 0: none
    ({"kvCache": {"hostMemory": "1536Mi"}}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", "--cache-ram", "1536",
      "--n-predict", "256"]),
    ({"kvCache": {"hostMemory": "2G"}}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", "--cache-ram", "1908",
      "--n-predict", "256"]),
    ({"kvCache": {"hostMemory": 0}}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", "--cache-ram", "0",
      "--n-predict", "256"]),
    # a pool member unloaded after its idle time
    ({"pool": {"name": "small", "idleSeconds": 120}}, LAPTOP,
     ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", *CACHE,
      "--sleep-idle-seconds", "120", "--n-predict", "256"]),
], ids=["defaults", "flash-attn", "llamaCpp", "ctx-size as given", "cores cap", "embeddings",
        "gpu and adapters", "a declared tier", "a decimal tier", "no tier", "idle member"])
def test_each_setting_becomes_its_flag(fields: dict[str, Any], where: Where,
                                       tail: list[str]) -> None:
    built = llama_server_args(_spec(**fields), where)
    assert list(built.args) == [*HEAD, *tail]
    assert built.ignored == ()


JINJA = "{% for m in messages %}{{ m.content }}{% endfor %}"
DEFAULTS = ["--ctx-size", "32768", "--threads", "2", "--parallel", "1", "--cache-ram", "256",
            "--n-predict", "256"]


@pytest.mark.parametrize(("engine_args", "template_flags"), [
    # a builtin name is applied only with Jinja off: with it on, llama-server took "gemma"
    # for the template's whole text and every prompt was the word gemma
    ({"chat-template": "gemma"}, ["--chat-template", "gemma", "--no-jinja"]),
    ({"chat-template": "chatml", "jinja": "false"}, ["--chat-template", "chatml", "--no-jinja"]),
    # Jinja text stays Jinja; nothing declared: the GGUF file's own template, with Jinja
    ({"chat-template": JINJA}, ["--chat-template", JINJA]),
    ({"chat-template-file": "/t/qa.jinja"}, ["--chat-template-file", "/t/qa.jinja"]),
    ({}, []),
], ids=["builtin", "builtin, jinja given", "jinja text", "jinja file", "the file's own"])
def test_the_declared_chat_template_is_the_one_applied(engine_args: dict[str, str],
                                                       template_flags: list[str]) -> None:
    built = llama_server_args(_spec(engineArgs=engine_args or None), LAPTOP)
    assert list(built.args) == [*HEAD, *DEFAULTS, *template_flags]


def test_a_pool_members_preset_applies_its_builtin_template_too() -> None:
    args = llama_server_args(_spec(engineArgs={"chat-template": "gemma"}), POD).args
    preset = models_preset([Member("gemma-3-270m", "/m.gguf", args)])
    assert "chat-template = gemma\n" in preset and "no-jinja = true\n" in preset


def test_an_ollama_model_runs_its_settings_on_llama_server() -> None:
    spec = _spec(inferenceEngine="ollama", engineArgs={
        "num-ctx": "2048", "num-parallel": "3", "flash-attention": "1",
        "kv-cache-type": "q4_0", "keep-alive": "-1", "max-loaded-models": "1"})
    built = llama_server_args(spec, LAPTOP)
    assert list(built.args) == [*HEAD, "--ctx-size", "6144", "--threads", "2", "--parallel",
                                "3", "--cache-ram", "256", "--n-predict", "256",
                                "--cache-type-k", "q4_0", "--cache-type-v", "q4_0",
                                "--flash-attn", "on"]
    assert built.ignored == ("engineArgs.keep-alive", "engineArgs.max-loaded-models")


@pytest.mark.parametrize(("path", "problem"), [
    ("/a/wild.gguf", None),
    ("/a:b/wild.gguf", "LoRA adapter wild: llama-server takes adapter files as FILE:SCALE lists "
     "and cannot load /a:b/wild.gguf (its path contains ':'); move or rename the file"),
    ("/a,b:c.gguf", "(its path contains ':' and ',')"),
])
def test_an_adapter_path_llama_server_cannot_take_is_named(path: str,
                                                           problem: str | None) -> None:
    found = lora_path_problem("wild", path)
    assert (found is None) is (problem is None)
    if problem is not None:
        assert found is not None and problem in found
