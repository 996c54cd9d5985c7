"""The rules of engineArgs.chat-template: a template each engine applies (CEL and Python)."""

from __future__ import annotations

from llm_operator.api.chat_templates import (
    ARG,
    FILE_ARG,
    JINJA_ARG,
    JINJA_MARKERS,
    LLAMACPP_BUILTINS,
    builtin_declared_with_jinja,
    llamacpp_template_known,
    vllm_template_usable,
)
from llm_operator.api.rule import ENGINE, Rule
from llm_operator.api.v1alpha1 import LLMModelSpec

DECLARED = f"(has(self.engineArgs) && '{ARG}' in self.engineArgs)"
VALUE = f"self.engineArgs['{ARG}']"
JINJA_TEXT = "(" + " || ".join(f"{VALUE}.contains('{m}')" for m in JINJA_MARKERS) + ")"
BUILTIN = f"({VALUE} in {list(LLAMACPP_BUILTINS)})"
BUILTIN_NAMES = ", ".join(LLAMACPP_BUILTINS)


def _args(spec: LLMModelSpec) -> dict[str, str]:
    return dict(spec.engine_args or {})


TEMPLATE_RULES: tuple[Rule, ...] = (
    Rule(
        id="llamacpp-chat-template-known",
        location="spec",
        field=".engineArgs",
        cel=f"{ENGINE} != 'llamacpp' || !{DECLARED} || {BUILTIN} || {JINJA_TEXT}",
        message=f"engineArgs.{ARG} is neither a builtin template of llama.cpp nor a Jinja "
        "template, so llama-server would send its text to the model in place of every "
        f"conversation: write one of {BUILTIN_NAMES}; or a Jinja template (text with {{% or "
        "{{); or remove it to use the template the GGUF file carries",
        holds=lambda s: s.inference_engine != "llamacpp" or llamacpp_template_known(_args(s)),
    ),
    Rule(
        id="llamacpp-builtin-template-without-jinja",
        location="spec",
        field=".engineArgs",
        cel=f"{ENGINE} != 'llamacpp' || !{DECLARED} || !{BUILTIN} || "
        f"!('{JINJA_ARG}' in self.engineArgs) || "
        f"!self.engineArgs['{JINJA_ARG}'].matches('(?i)^true$')",
        message=f"engineArgs.{ARG} names a builtin template of llama.cpp, which llama-server "
        f"applies only with its Jinja engine off; with engineArgs.{JINJA_ARG} \"true\" it "
        "would send the name to the model in place of every conversation: remove "
        f"engineArgs.{JINJA_ARG} (the builtin is then applied with --no-jinja), or give "
        f"{ARG} as a Jinja template",
        holds=lambda s: s.inference_engine != "llamacpp"
        or not builtin_declared_with_jinja(_args(s)),
    ),
    Rule(
        id="chat-template-once",
        location="spec",
        field=".engineArgs",
        cel=f"!{DECLARED} || !('{FILE_ARG}' in self.engineArgs)",
        message=f"engineArgs: give {ARG} or {FILE_ARG}, not both (the engine keeps only the "
        "last one it reads)",
        holds=lambda s: not {ARG, FILE_ARG} <= set(_args(s)),
    ),
    Rule(
        id="vllm-chat-template-is-jinja",
        location="spec",
        field=".engineArgs",
        cel=f"{ENGINE} != 'vllm' || !{DECLARED} || {JINJA_TEXT} || {VALUE}.startsWith('/')",
        message=f"engineArgs.{ARG}: vLLM takes a Jinja template (its text, or the absolute "
        "path of a file in the engine's image), not a template's name, and would refuse to "
        "start: remove it to use the template the weights carry (chat_template in "
        "tokenizer_config.json, or chat_template.jinja), or give the template's text",
        holds=lambda s: s.inference_engine != "vllm" or vllm_template_usable(_args(s)),
    ),
)
