"""Chat templates: which one an engine applies to a model's messages, from its engineArgs.

llama-server's ``--chat-template`` is read as Jinja text while its Jinja engine is on (the
default since llama.cpp moved to Jinja): ``--chat-template gemma`` made every prompt the
five letters ``gemma``. A builtin template is applied by name only with ``--no-jinja``. So
a declared builtin name renders as ``--no-jinja --chat-template NAME``, Jinja text stays
Jinja, and with no ``chat-template`` the GGUF file's own template applies (ChatML when the
file carries none). vLLM takes only Jinja text or a file path: a llama.cpp name is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

ARG = "chat-template"
FILE_ARG = "chat-template-file"
JINJA_ARG = "jinja"
# llama.cpp's builtin templates (src/llama-chat.cpp's LLM_CHAT_TEMPLATES) in the pinned
# llama-server, as `llama-server --help` lists them; tests/local reads the binary's help and
# fails when the two differ.
LLAMACPP_BUILTINS = (
    "bailing", "bailing-think", "bailing2", "chatglm3", "chatglm4", "chatml", "command-r",
    "deepseek", "deepseek-ocr", "deepseek2", "deepseek3", "exaone-moe", "exaone3", "exaone4",
    "falcon3", "gemma", "gigachat", "glmedge", "gpt-oss", "granite", "granite-4.0",
    "granite-4.1", "grok-2", "hunyuan-dense", "hunyuan-moe", "hunyuan-vl", "kimi-k2", "llama2",
    "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "llama3", "llama4", "megrez",
    "minicpm", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
    "mistral-v7-tekken", "monarch", "openchat", "orion", "pangu-embedded", "phi3", "phi4",
    "rwkv-world", "seed_oss", "smolvlm", "solar-open", "vicuna", "vicuna-orca", "yandex",
    "zephyr",
)
# What makes a value Jinja text rather than a name: a statement, an expression or a comment.
JINJA_MARKERS = ("{%", "{{", "{#")


def is_jinja(value: str) -> bool:
    """The value is a Jinja template's text, not a template's name."""
    return any(marker in value for marker in JINJA_MARKERS)


def is_builtin(value: str) -> bool:
    return value in LLAMACPP_BUILTINS


def llamacpp_template_args(args: Mapping[str, str]) -> dict[str, str]:
    """The engineArgs to give llama-server so that a declared builtin name is applied.

    ``chat-template: gemma`` gains ``jinja: "false"`` (``--no-jinja``): with Jinja on,
    llama-server would take the name for the template's whole text. Anything else is left
    as written; the rules in ``api.template_rules`` refuse what cannot work.
    """
    value = args.get(ARG)
    if value is not None and is_builtin(value) and JINJA_ARG not in args:
        return {**args, JINJA_ARG: "false"}
    return dict(args)


def builtin_declared_with_jinja(args: Mapping[str, str]) -> bool:
    """A builtin name with ``jinja: "true"``: llama-server would read the name as Jinja."""
    value = args.get(ARG)
    return value is not None and is_builtin(value) \
        and args.get(JINJA_ARG, "").lower() == "true"


def llamacpp_template_known(args: Mapping[str, str]) -> bool:
    """``chat-template`` is absent, a builtin name or Jinja text."""
    value = args.get(ARG)
    return value is None or is_builtin(value) or is_jinja(value)


def vllm_template_usable(args: Mapping[str, str]) -> bool:
    """VLLM's ``chat-template`` is absent, Jinja text or an absolute file path."""
    value = args.get(ARG)
    return value is None or is_jinja(value) or value.startswith("/")
