"""A pool's llama-server in router mode: its arguments and the preset each member loads with."""

from __future__ import annotations

import pytest

from llm_operator.api.validation import parse_llmmodel
from llm_operator.local.placement import LocalServe
from llm_operator.profiles.llama_router import Member, flag_pairs, models_preset, router_args

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
n-predict = 256
chat-template = gemma
ctx-size = 2048
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
