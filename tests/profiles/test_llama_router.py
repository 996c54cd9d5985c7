"""A pool's llama-server in router mode: its arguments and the preset each member loads with."""

from __future__ import annotations

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.placement import LocalServe
from llm_operator.profiles.llama_router import (
    Member,
    flag_pairs,
    load_error,
    models_preset,
    router_args,
)

from samples import REPO, load_yaml

CHAT = REPO / "examples" / "cluster" / "model-pool" / "gemma-pool-chat.yaml"


@pytest.mark.parametrize(("args", "pairs"), [
    (["--ctx-size", "2048", "--metrics"], [("ctx-size", "2048"), ("metrics", "true")]),
    (["--metrics", "--threads", "1"], [("metrics", "true"), ("threads", "1")]),
    (["--temp", "-1"], [("temp", "-1")]),  # a negative number is a value, not a flag
    ([], []),
])
def test_arguments_become_preset_keys(args: list[str], pairs: list[tuple[str, str]]) -> None:
    assert flag_pairs(args) == pairs


def test_a_value_without_its_flag_is_refused() -> None:
    with pytest.raises(ValueError, match="'2048' is not a --flag"):
        flag_pairs(["2048"])


def test_each_member_loads_with_its_own_arguments_less_what_the_router_sets() -> None:
    model = parse_llmmodel(load_yaml(CHAT))
    args = LocalServe(model, 2).server_args("/m/gemma.gguf", 0)
    preset = models_preset([
        Member("gemma-3-270m-chat", "/m/gemma.gguf", args, load_on_startup=True),
        Member("other", "/m/other.gguf", ["--ctx-size", "512"])])
    assert preset == """version = 1

[gemma-3-270m-chat]
model = /m/gemma.gguf
metrics = true
threads = 1
parallel = 1
cache-ram = 256
n-predict = 256
chat-template = gemma
ctx-size = 2048
no-jinja = true
warmup = false
load-on-startup = true

[other]
model = /m/other.gguf
ctx-size = 512
warmup = false
"""


@pytest.mark.parametrize("value", ["a\nb", " padded"])
def test_a_value_an_ini_file_cannot_hold_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="cannot be written to an INI preset"):
        models_preset([Member("m", "/m.gguf", ["--chat-template", value])])


def test_the_router_loads_at_most_max_loaded() -> None:
    assert router_args("127.0.0.1", 8080, "/s/pool.ini", 2) == [
        "--host", "127.0.0.1", "--port", "8080", "--models-preset", "/s/pool.ini",
        "--models-max", "2"]


# Recorded from the router's log (trimmed): member "bad" is a GGUF file cut short, "good"
# started and loaded on another port, and a later member "other" reused bad's port.
ROUTER_LOG = """\
0.03.017.228 I srv          load: spawning server instance with name=bad on port 43775
0.03.017.467 I srv          load:   /tmp/pooltest/trunc.gguf
[43775] 0.00.002.192 I srv  llama_server: initializing ...
[43775] 0.00.007.953 I srv    load_model: loading model '/tmp/pooltest/trunc.gguf'
[43775] 0.00.144.416 E llama_model_load: error loading model: tensor 'token_embd.weight' \
data is not within the file bounds, model is corrupted or incomplete
[43775] 0.00.144.442 E llama_model_load_from_file_impl: failed to load model
[43775] 0.00.233.306 E srv    load_model: failed to load model, '/tmp/pooltest/trunc.gguf'
[43775] 0.00.233.898 E srv  llama_server: exiting due to model loading error
0.03.308.486 I srv           run: instance name=bad exited with status 1
0.04.000.001 I srv          load: spawning server instance with name=good on port 40001
[40001] 0.00.100.000 I srv    load_model: loading model '/models/good.gguf'
0.05.000.001 I srv          load: spawning server instance with name=flags on port 40002
[40002] 0.00.001.000 E srv  llama_server: invalid argument: --frobnicate
0.05.100.000 I srv           run: instance name=flags exited with status 1
0.06.000.001 I srv          load: spawning server instance with name=other on port 43775
[43775] 0.00.144.416 E llama_model_load: error loading model: not bad's error
"""


@pytest.mark.parametrize(("member", "reason"), [
    ("bad", "tensor 'token_embd.weight' data is not within the file bounds, model is "
            "corrupted or incomplete"),
    ("flags", "invalid argument: --frobnicate"),  # no load error: its first error line
    ("good", None),  # started, no error
    ("never-started", None),
    ("other", "not bad's error"),  # its own start only, though the port is bad's
])
def test_a_members_load_error_is_the_engines_own_words(member: str, reason: str | None
                                                       ) -> None:
    assert load_error(ROUTER_LOG, member) == reason
