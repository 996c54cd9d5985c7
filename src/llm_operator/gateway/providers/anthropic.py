"""Anthropic's Messages API as an upstream: OpenAI chat requests out, its answers back.

Shapes follow Anthropic's published Messages API reference (``POST /v1/messages``,
``x-api-key``, ``anthropic-version``, the ``message_start`` … ``message_stop`` events).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from llm_operator.gateway.providers.shapes import (
    DONE,
    ChunkWriter,
    EventStream,
    Image,
    Translated,
    Untranslatable,
    add_turn,
    arguments_of,
    choice,
    completion,
    count_of,
    error_body,
    function_tools,
    max_tokens_of,
    messages_of,
    screen,
    stops_of,
    text_of,
    tool_call,
    tool_choice_of,
    usage,
    user_parts,
)

VERSION = "2023-06-01"  # the anthropic-version header every Messages request carries

FINISH = {"end_turn": "stop", "stop_sequence": "stop", "pause_turn": "stop",
          "max_tokens": "length", "model_context_window_exceeded": "length",
          "tool_use": "tool_calls", "refusal": "content_filter"}

HANDLED = frozenset({"model", "messages", "stream", "stream_options", "max_tokens",
                     "max_completion_tokens", "temperature", "top_p", "stop", "tools",
                     "tool_choice", "parallel_tool_calls", "user", "response_format"})


def _image(image: Image) -> dict[str, Any]:
    if image.data is not None:
        return {"type": "image", "source": {"type": "base64", "media_type": image.media_type,
                                            "data": image.data}}
    return {"type": "image", "source": {"type": "url", "url": image.url}}


def _blocks(message: dict[str, Any], where: str) -> tuple[str, list[dict[str, Any]]]:
    """The Anthropic role and content blocks of one OpenAI message (not a system one)."""
    role, content = message.get("role"), message.get("content")
    if role == "user":
        return "user", [{"type": "text", "text": p} if isinstance(p, str) else _image(p)
                        for p in user_parts(content, f"{where}.content")
                        if not isinstance(p, str) or p]
    if role == "assistant":
        text = text_of(content, f"{where}.content")
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for k, call in enumerate(message.get("tool_calls") or []):
            at = f"{where}.tool_calls.{k}"
            arguments = arguments_of(call, at)
            if not isinstance(call.get("id"), str):
                raise Untranslatable(f"{at}.id: required")
            blocks.append({"type": "tool_use", "id": call["id"],
                           "name": call["function"]["name"], "input": arguments})
        return "assistant", blocks
    if role == "tool":
        if not isinstance(message.get("tool_call_id"), str):
            raise Untranslatable(f"{where}.tool_call_id: required")
        return "user", [{"type": "tool_result", "tool_use_id": message["tool_call_id"],
                         "content": text_of(content, f"{where}.content")}]
    raise Untranslatable(f"{where}.role: must be system, developer, user, assistant or tool")


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tools = function_tools(body)
    if tools:
        out["tools"] = [{"name": f["name"],
                         **({"description": f["description"]} if f.get("description") else {}),
                         "input_schema": f.get("parameters") or {"type": "object",
                                                                 "properties": {}}}
                        for f in tools]
    picked = tool_choice_of(body)
    if picked is not None:
        kind, name = picked
        mapped: dict[str, Any] = {"type": {"auto": "auto", "required": "any", "none": "none",
                                           "function": "tool"}[kind]}
        if name is not None:
            mapped["name"] = name
        out["tool_choice"] = mapped
    if body.get("parallel_tool_calls") is False and tools:
        out["tool_choice"] = {"type": "auto", **out.get("tool_choice", {}),
                              "disable_parallel_tool_use": True}
        if out["tool_choice"]["type"] == "none":
            del out["tool_choice"]["disable_parallel_tool_use"]
    return out


@dataclass(frozen=True)
class AnthropicApi:
    """``POST {baseUrl}/messages``; the key in ``x-api-key``."""

    name: str = "anthropic"

    def translate(self, body: dict[str, Any], model: str, *, stream: bool,
                  max_tokens: int) -> Translated:
        dropped = screen(body, self.name, HANDLED)
        response_format = body.get("response_format")
        if isinstance(response_format, dict) and response_format.get("type") not in (None,
                                                                                     "text"):
            raise Untranslatable("response_format: JSON output is not translated for a "
                                 "native anthropic upstream; describe the format in the "
                                 "prompt or use tools")
        system: list[str] = []
        messages: list[dict[str, Any]] = []
        for i, message in enumerate(messages_of(body)):
            where = f"messages.{i}"
            if message.get("role") in {"system", "developer"}:
                system.append(text_of(message.get("content"), f"{where}.content"))
                continue
            role, blocks = _blocks(message, where)
            if not blocks:
                continue
            add_turn(messages, role, blocks, "content")
        if not messages:
            raise Untranslatable("messages: give at least one user message")
        out: dict[str, Any] = {"model": model, "max_tokens": max_tokens_of(body, max_tokens),
                               "messages": messages}
        if system:
            out["system"] = "\n\n".join(system)
        for name in ("temperature", "top_p"):
            if body.get(name) is not None:
                out[name] = body[name]
        if stops := stops_of(body):
            out["stop_sequences"] = stops
        out.update(_tools(body))
        if isinstance(body.get("user"), str):
            out["metadata"] = {"user_id": body["user"]}
        if stream:
            out["stream"] = True
        return Translated("/messages", out, dropped)

    def answer(self, body: dict[str, Any], now: int) -> dict[str, Any]:
        blocks = [b for b in body.get("content") or [] if isinstance(b, dict)]
        text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        calls = [tool_call(None, str(b.get("id")), str(b.get("name")),
                           json.dumps(b.get("input") or {}, separators=(",", ":")))
                 for b in blocks if b.get("type") == "tool_use"]
        finish = FINISH.get(str(body.get("stop_reason")), "stop")
        return completion(str(body.get("id", "")), str(body.get("model", "")), now,
                          [choice(0, text, calls, finish)], _usage(body.get("usage")))

    def error(self, status: int, body: Any) -> dict[str, Any]:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = str(error.get("type") or "api_error")
            return error_body(f"anthropic: {error['message']}", kind, kind)
        return error_body(f"anthropic answered HTTP {status}", "api_error")

    def stream(self, now: int) -> AnthropicStream:
        return AnthropicStream(ChunkWriter(now))


def _usage(raw: Any) -> dict[str, Any]:
    """OpenAI usage for Anthropic's: cache reads and writes are prompt tokens too."""
    cached = count_of(raw, "cache_read_input_tokens")
    prompt = count_of(raw, "input_tokens") + count_of(raw, "cache_creation_input_tokens") \
        + cached
    return usage(prompt, count_of(raw, "output_tokens"), cached)


@dataclass
class AnthropicStream(EventStream):
    """Anthropic's stream events in, OpenAI chunks out (text, tool calls, finish, usage)."""

    _usage: dict[str, Any] = field(default_factory=dict)
    _tools: dict[int, int] = field(default_factory=dict)  # content block -> tool call index
    _done: bool = False

    def _event(self, event: dict[str, Any]) -> bytes:
        if self._done:
            return b""
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") or {}
            self.out.id, self.out.model = str(message.get("id", "")), str(
                message.get("model", ""))
            self._usage.update(message.get("usage") or {})
            return self.out.delta({"role": "assistant", "content": ""})
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self._tools[int(event.get("index", 0))] = len(self._tools)
                return self.out.delta({"tool_calls": [tool_call(
                    index, str(block.get("id")), str(block.get("name")), "")]})
            if block.get("type") == "text" and block.get("text"):
                return self.out.delta({"content": block["text"]})
            return b""
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta":
                return self.out.delta({"content": delta.get("text", "")})
            tool = self._tools.get(int(event.get("index", 0)))
            if delta.get("type") == "input_json_delta" and tool is not None:
                return self.out.delta({"tool_calls": [{"index": tool, "function": {
                    "arguments": delta.get("partial_json", "")}}]})
            return b""  # thinking and signatures are not part of an OpenAI answer
        if kind == "message_delta":
            self._usage.update({k: v for k, v in (event.get("usage") or {}).items()
                                if v is not None})
            reason = (event.get("delta") or {}).get("stop_reason")
            return self.out.delta({}, FINISH.get(str(reason), "stop")) if reason else b""
        if kind == "message_stop":
            self._done = True
            return self.out.usage(_usage(self._usage)) + DONE
        if kind == "error":
            self._done = True
            error = event.get("error") or {}
            return self.out.error(f"anthropic: {error.get('message', 'stream failed')}",
                                  str(error.get("type") or "api_error"))
        return b""  # ping, and event types added later

    def close(self) -> bytes:
        if self._done:
            return b""
        self._done = True
        return self.out.error("anthropic: the stream ended before message_stop")
