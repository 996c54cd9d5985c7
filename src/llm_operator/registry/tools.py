"""MCP tool shapes (pure): schemas, argument checks, the chat request and the tool result."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llm_operator.registry.catalog import ToolRecord
from llm_operator.registry.query import SERVING_PHASES, Query

LIST_TOOL = "list_available_models"
LIST_DESCRIPTION = (
    "Lists the LLM models currently available as tools, with their capabilities, context "
    "windows, accelerator vendor, deployment mode and status. Call this first to discover "
    "which model to use for a task; every filter is optional.")
THINKING_INSTRUCTION = ("Think step by step before answering. "
                        "Use <think>...</think> tags for your internal reasoning.")
DEFAULT_TEMPERATURE = 0.7
DEFAULT_MAX_TOKENS = 2048
ANTHROPIC_THINKING_BUDGET = 1024  # Anthropic's minimum budget_tokens

_MODEL_ENTRY = {
    "type": "object",
    "properties": {
        "toolName": {"type": "string"},
        "modelId": {"type": "string"},
        "name": {"type": "string"},
        "namespace": {"type": ["string", "null"]},
        "domains": {"type": "array", "items": {"type": "string"}},
        "contextWindowK": {"type": ["integer", "null"]},
        "servedContextTokens": {"type": ["integer", "null"], "description":
                                "The context the serving engine allocates (its ctx-size); "
                                "prompt plus answer must fit in it."},
        "supportsThinking": {"type": "boolean"},
        "status": {"type": ["string", "null"]},
        "vendor": {"type": ["string", "null"]},
        "mode": {"type": ["string", "null"]},
        "endpoint": {"type": ["string", "null"]},
        "adapterOf": {"type": "string", "description": "For a LoRA adapter's tool: the "
                      "modelId of the model it adapts (modelId is the adapter's name)."},
    },
    "required": ["toolName", "modelId", "domains", "contextWindowK", "supportsThinking",
                 "status", "vendor", "mode"],
}

LIST_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "domain": {"type": "string", "description": "Capability domain every result has, "
                   "e.g. reasoning, code, vision, math."},
        "min_context_k": {"type": "integer", "minimum": 1,
                          "description": "Minimum context window in thousands of tokens."},
        "vendor": {"type": "string", "enum": ["nvidia", "amd", "intel-gaudi", "cpu"],
                   "description": "Accelerator vendor (local models)."},
        "mode": {"type": "string", "enum": ["local", "remote"],
                 "description": "local (in the cluster) or remote (a frontier API proxy)."},
        "thinking": {"type": "boolean", "description": "Only models with (or without) a "
                     "thinking mode."},
    },
    "additionalProperties": False,
}
LIST_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"count": {"type": "integer"},
                   "models": {"type": "array", "items": _MODEL_ENTRY}},
    "required": ["count", "models"],
}

MODEL_INPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "messages": {
            "type": "array", "minItems": 1, "description": "Conversation history.",
            "items": {
                "type": "object",
                "properties": {"role": {"type": "string",
                                        "enum": ["system", "user", "assistant"]},
                               "content": {"type": "string"}},
                "required": ["role", "content"],
                "additionalProperties": False,
            },
        },
        "temperature": {"type": "number", "minimum": 0, "maximum": 2,
                        "description": "Sampling temperature (0=deterministic, 2=creative)."},
        "max_tokens": {"type": "integer", "exclusiveMinimum": 0,
                       "description": "Maximum tokens to generate."},
        "thinking": {"type": "boolean", "description":
                     "Enable chain-of-thought reasoning on models with a hybrid thinking mode "
                     "(e.g. Qwen3.5, Qwen3.6). Increases latency, improves hard tasks."},
    },
    "required": ["messages"],
    "additionalProperties": False,
}
MODEL_OUTPUT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string"},
        "model": {"type": "string"},
        "finishReason": {"type": ["string", "null"]},
        "thinking": {"type": "boolean", "description": "Whether thinking was switched on."},
        "reasoning": {"type": ["string", "null"]},
        "usage": {"type": "object", "properties": {
            "promptTokens": {"type": "integer"}, "completionTokens": {"type": "integer"},
            "totalTokens": {"type": "integer"}}},
    },
    "required": ["text", "model", "thinking", "usage"],
}


def list_tool() -> dict[str, Any]:
    return {"name": LIST_TOOL, "title": "List available models", "description": LIST_DESCRIPTION,
            "inputSchema": LIST_INPUT_SCHEMA, "outputSchema": LIST_OUTPUT_SCHEMA,
            "annotations": {"readOnlyHint": True, "idempotentHint": True,
                            "openWorldHint": False}}


def model_input_schema(thinking: bool) -> dict[str, Any]:
    """The model tool's input; ``thinking`` is offered only by models that have the mode."""
    if thinking:
        return MODEL_INPUT_SCHEMA
    properties = {k: v for k, v in MODEL_INPUT_SCHEMA["properties"].items() if k != "thinking"}
    return {**MODEL_INPUT_SCHEMA, "properties": properties}


def model_tool(record: ToolRecord) -> dict[str, Any]:
    """The tool for one model; remote models reach outside the cluster (openWorldHint)."""
    return {"name": record.tool_name, "title": record.model_id, "description":
            record.description,
            "inputSchema": model_input_schema(record.facets.supports_thinking),
            "outputSchema": MODEL_OUTPUT_SCHEMA,
            "annotations": {"readOnlyHint": True, "destructiveHint": False,
                            "idempotentHint": False, "openWorldHint": record.remote}}


class ArgumentError(ValueError):
    """Tool arguments that do not match the input schema; the message names the field."""


def _check_type(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> None:
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise ArgumentError(f"{name} must be {what}, got {type(value).__name__}")


def list_query(arguments: Mapping[str, Any] | None) -> Query:
    """list_available_models' filters as a registry query over serving models."""
    args = dict(arguments or {})
    unknown = sorted(set(args) - set(LIST_INPUT_SCHEMA["properties"]))
    if unknown:
        raise ArgumentError(f"unknown argument(s) {', '.join(unknown)}; expected any of "
                            f"{', '.join(LIST_INPUT_SCHEMA['properties'])}")
    checks = {"domain": (str, "a string"), "min_context_k": (int, "an integer"),
              "vendor": (str, "a string"), "mode": (str, "a string"),
              "thinking": (bool, "true or false")}
    for key, (kind, what) in checks.items():
        if args.get(key) is not None:
            _check_type(key, args[key], kind, what)
    for key in ("vendor", "mode"):
        allowed = LIST_INPUT_SCHEMA["properties"][key]["enum"]
        if args.get(key) is not None and args[key] not in allowed:
            raise ArgumentError(f"{key} must be one of {', '.join(allowed)}")
    return Query(domains=(args["domain"],) if args.get("domain") else (),
                 min_context_k=args.get("min_context_k"), vendor=args.get("vendor"),
                 mode=args.get("mode"), thinking=args.get("thinking"), phases=SERVING_PHASES)


def list_result(records: list[ToolRecord]) -> dict[str, Any]:
    return {"count": len(records), "models": [r.info for r in records]}


@dataclass(frozen=True)
class ChatArguments:
    """Validated arguments of a model tool call."""

    messages: list[dict[str, str]]
    temperature: float
    max_tokens: int
    thinking: bool | None


def chat_arguments(arguments: Mapping[str, Any] | None, *, thinking: bool = True
                   ) -> ChatArguments:
    """A model tool's arguments, checked against its input.

    ``thinking`` says the model has a thinking mode, so the argument is offered.
    """
    args = dict(arguments or {})
    if "thinking" in args and not thinking:
        raise ArgumentError("thinking: this model has no thinking mode (supportsThinking is "
                            "false); leave the argument out")
    expected = list(model_input_schema(thinking)["properties"])
    unknown = sorted(set(args) - set(expected))
    if unknown:
        raise ArgumentError(f"unknown argument(s) {', '.join(unknown)}; expected "
                            f"{', '.join(expected)}")
    messages = args.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ArgumentError("messages must be a non-empty list of {role, content} objects")
    clean: list[dict[str, str]] = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or set(m) != {"role", "content"}:
            raise ArgumentError(f"messages[{i}] must be an object with exactly role and content")
        if m["role"] not in ("system", "user", "assistant"):
            raise ArgumentError(f"messages[{i}].role must be system, user or assistant")
        if not isinstance(m["content"], str):
            raise ArgumentError(f"messages[{i}].content must be a string")
        clean.append({"role": m["role"], "content": m["content"]})
    temperature = args.get("temperature", DEFAULT_TEMPERATURE)
    _check_type("temperature", temperature, (int, float), "a number")
    if not 0 <= temperature <= 2:
        raise ArgumentError("temperature must be between 0 and 2")
    max_tokens = args.get("max_tokens", DEFAULT_MAX_TOKENS)
    _check_type("max_tokens", max_tokens, int, "an integer")
    if max_tokens <= 0:
        raise ArgumentError("max_tokens must be greater than 0")
    switch = args.get("thinking")
    if switch is not None:
        _check_type("thinking", switch, bool, "true or false")
    return ChatArguments(clean, float(temperature), max_tokens, switch)


def _with_instruction(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """The guide's fallback: append the instruction to the system prompt, or add one."""
    out = [dict(m) for m in messages]
    for m in out:
        if m["role"] == "system":
            m["content"] = f"{m['content']}\n\n{THINKING_INSTRUCTION}"
            return out
    return [{"role": "system", "content": THINKING_INSTRUCTION}, *out]


def chat_request(record: ToolRecord, args: ChatArguments) -> tuple[dict[str, Any], bool]:
    """The OpenAI chat-completions body, and whether thinking is on.

    Thinking is switched the way the model family supports it; an explicit ``thinking:
    false`` turns a chat-template switch off. Models without a thinking mode ignore it.
    """
    body: dict[str, Any] = {"model": record.model_id, "messages": args.messages,
                            "temperature": args.temperature, "max_tokens": args.max_tokens,
                            **record.request}
    if record.base_model:  # record.path is completions
        del body["messages"]
        return body | transcript_request(args.messages), False
    if not record.facets.supports_thinking or args.thinking is None:
        return body, bool(record.facets.supports_thinking and args.thinking)
    on = args.thinking
    style = record.thinking_style
    if style == "anthropic" and on and args.max_tokens <= ANTHROPIC_THINKING_BUDGET:
        style = "system_prompt"  # the budget must stay below max_tokens
    if style == "enable_thinking":
        body["chat_template_kwargs"] = {"enable_thinking": on}
    elif style == "deepseek":
        body["chat_template_kwargs"] = {"thinking": on}
    elif not on:
        pass
    elif style == "reasoning_effort":
        body["reasoning_effort"] = "high"
    elif style == "anthropic":
        body["thinking"] = {"type": "enabled", "budget_tokens": ANTHROPIC_THINKING_BUDGET}
    else:
        body["messages"] = _with_instruction(args.messages)
    return body, on


def transcript_request(messages: Sequence[Mapping[str, str]]) -> dict[str, Any]:
    """A conversation as a Q/A transcript for a base model to continue (/v1/completions).

    System text comes first; each user turn is a ``Q:`` line and each answer an ``A:`` line;
    the prompt ends with ``A:`` and the answer stops at the end of its line.
    """
    lines = []
    for m in messages:
        content = " ".join(m["content"].split())  # one line each: the answer stops at "\n"
        if m["role"] == "system":
            lines.append(content)
        else:
            lines.append(f"{'Q' if m['role'] == 'user' else 'A'}: {content}")
    return {"prompt": "\n".join(lines) + "\nA:", "stop": ["\n"]}


def chat_result(record: ToolRecord, response: Any, thinking: bool) -> tuple[str, dict[str, Any]]:
    """(text, structured content) from an OpenAI chat-completions (or completions) response."""
    if not isinstance(response, Mapping) or not response.get("choices"):
        raise ValueError("the response has no choices")
    choice = response["choices"][0]
    message = choice.get("message") or {}
    text = (message.get("content") or choice.get("text") or "").strip() \
        if record.base_model else message.get("content") or ""
    usage = response.get("usage") or {}
    structured = {
        "text": text, "model": str(response.get("model") or record.model_id),
        "finishReason": choice.get("finish_reason"), "thinking": thinking,
        "reasoning": message.get("reasoning_content") or message.get("reasoning"),
        "usage": {"promptTokens": int(usage.get("prompt_tokens") or 0),
                  "completionTokens": int(usage.get("completion_tokens") or 0),
                  "totalTokens": int(usage.get("total_tokens") or 0)},
    }
    return str(text), structured
